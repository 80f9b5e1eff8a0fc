"""mooncake, provided by kvconnect: ``mooncake.engine`` is kvconnect's engine.

This package replaces Mooncake's ``mooncake-transfer-engine`` for serving
stacks that only use its transfer engine (vLLM's MooncakeConnector,
SGLang's disaggregation): ``from mooncake.engine import TransferEngine``
loads kvconnect.TransferEngine. Uninstall mooncake-transfer-engine first;
see docs/PYTHON.md.
"""
