"""roost's own agent hosts, each a default plugin of its own that registers it through
``roost_register_hosts``, the hook a team's host uses: ``scripted``, ``shell``, ``pi``,
``claude``, ``codex``, ``qwen``, ``opencode`` and ``gemini`` (the plugin's name is the
host's). Blocking one (``--disable-plugin pi``,
``plugins.disable``) takes its host away: ``--host pi`` is then an unknown host, and
another plugin may register a host under the name.

The code that runs each host is in a package of its own (:mod:`roost_plugins.pi`,
:mod:`roost_plugins.claude`, ...; ``scripted`` and ``shell`` in :mod:`roost_core.hosts`);
a plugin here only says what the host contributes.
"""
