"""The gateway's HTTP face (FastAPI): the app and its platform routes (``app``),
the ``/v1`` API (``api_v1``), who is calling (``auth``), reading bodies
(``bodies``) and readiness (``health``). Nothing below it imports it."""
