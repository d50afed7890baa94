"""The built-in plugins: memory policies (``policies``) and admission strategies
(``admission``). They reach the session only through the hooks in ``core/hookspecs.py``,
like any third-party plugin; the core names them in ``core/plugin_manager.BUILTIN_PLUGINS``.
"""
