"""dagagent.text: what a command line looks like with its secrets hidden."""

from __future__ import annotations

import pytest

from dagagent.text import mask_keys, redact_command_line


@pytest.mark.parametrize(
    ("command", "recorded"),
    [
        ("python server.py", "python server.py"),
        ("python server.py --port 8080", "python server.py --port ***"),
        ("env GITHUB_TOKEN=ghp_x1 npx -y srv", "env GITHUB_TOKEN=*** npx -y ***"),
        ("srv --api-key=sk-1 --token t-2 --verbose", "srv --api-key=*** --token *** --verbose"),
        ("srv --Password hunter2 --user ann", "srv --Password *** --user ***"),
        ('curl -H "Authorization: Bearer abc" x', "curl -H *** x"),
        ("https://ann:pw@h/mcp?api_key=k1&page=2", "https://***@h/mcp?api_key=***&page=***"),
        ("https://h/mcp", "https://h/mcp"),
        ("srv 'a b' --secret", "srv 'a b' --secret"),  # nothing after the option: kept as typed
        ("srv 'unbalanced --token t", "srv ''\"'\"'unbalanced' --token ***"),
    ],
)
def test_a_command_line_keeps_everything_but_its_values(command: str, recorded: str) -> None:
    assert redact_command_line(command) == recorded


# Secrets whose names do not say so, in every place a command line can hold them: each one
# must be gone from the recorded command, whatever it is called.
SECRETS = {
    "REDIS_AUTH=r3d1s-Quill-77": "r3d1s-Quill-77",
    "HF_READ=plainvalue42": "plainvalue42",
    "--pat glpat-Zk29dQmT7xLp0vNw4Rsa": "glpat-Zk29dQmT7xLp0vNw4Rsa",
    "-k kestrel-9981": "kestrel-9981",
    "-Pkestrel-9982": "kestrel-9982",
    "--bearer=opal-brook-31": "opal-brook-31",
    "xoxb-1234567890-abcdefghij": "xoxb-1234567890-abcdefghij",
    "sk_live_51HdQzFkA2b3c4d5e6f7g": "sk_live_51HdQzFkA2b3c4d5e6f7g",
    "3f2b9c1e-7d44-4e1a-9b6f-0c8d2e5a7b91": "3f2b9c1e-7d44-4e1a-9b6f-0c8d2e5a7b91",
    "https://gw.example/AbCdEfGh1234IjKlMnOp5678QrStUvWx/mcp": "AbCdEfGh1234IjKlMnOp5678QrStUvWx",
    "https://svc.example/mcp?sig=q8Zr5&v=2": "q8Zr5",
    "https://bot:tulip-44@svc.example/mcp": "tulip-44",
    "X-Relay-Code:amber-76": "amber-76",
}


@pytest.mark.parametrize("part", sorted(SECRETS))
def test_no_value_of_a_stored_server_command_survives_whatever_its_name(part: str) -> None:
    from dagagent.cli.recording import recorded_mcp_spec

    stored = recorded_mcp_spec(f"vault=node dist/server.js {part} --stdio")
    assert SECRETS[part] not in stored and "***" in stored
    assert stored.startswith("vault=node dist/server.js ")


@pytest.mark.parametrize(
    "text",
    ["sk-proj-Ab12Cd34Ef56Gh78Ij90", "ghp_1234567890abcdefghijABCD", "AKIAIOSFODNN7EXAMPLE"],
)
def test_values_that_look_like_keys_are_masked_anywhere(text: str) -> None:
    assert mask_keys(f"see {text}.") == "see ***."


def test_ordinary_words_and_paths_are_not_taken_for_keys() -> None:
    for text in ("examples/mcp_server.py", "mcp-server-fetch", "my_company_internal_tools_v2"):
        assert mask_keys(text) == text
