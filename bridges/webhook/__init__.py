"""The generic signed JSON webhook for platforms without a bridge of their own."""
