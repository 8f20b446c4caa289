"""WeChat Official Account and WeCom callbacks: pure parser, callback crypto, reply API."""
