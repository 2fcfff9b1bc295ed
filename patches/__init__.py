"""The SGLang hidden-state dump patch (pinned to one SGLang version, see hooks.SGLANG_VERSION).

``python -m patches.sglang_dump <sglang server args>`` starts the patched server;
``runner.contract.launch.server_argv`` builds that command line from the runner's config.
"""
