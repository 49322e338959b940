"""dagagent.text: what a command line looks like with its secrets hidden."""

from __future__ import annotations

import pytest

from dagagent.text import redact_command_line


@pytest.mark.parametrize(
    ("command", "recorded"),
    [
        ("python server.py --port 8080", "python server.py --port 8080"),
        ("env GITHUB_TOKEN=ghp_x1 npx -y srv", "env GITHUB_TOKEN=*** npx -y srv"),
        ("srv --api-key=sk-1 --token t-2 --port 3", "srv --api-key=*** --token *** --port 3"),
        ("srv --Password hunter2 --user ann", "srv --Password *** --user ann"),
        ('curl -H "Authorization: Bearer abc" x', "curl -H 'Authorization: '*** x"),
        ("https://ann:pw@h/mcp?api_key=k1&page=2", "https://***@h/mcp?api_key=***&page=2"),
        ("https://h/mcp?page=2", "https://h/mcp?page=2"),
        ("srv 'a b' --secret", "srv 'a b' --secret"),  # nothing after the option: kept as typed
        ("srv 'unbalanced --token t", "srv ''\"'\"'unbalanced' --token ***"),
    ],
)
def test_a_command_line_keeps_everything_but_its_secrets(command: str, recorded: str) -> None:
    assert redact_command_line(command) == recorded
