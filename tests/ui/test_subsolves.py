"""The viewer's solve page lists the sub-solves of its tasks, each a link to its own page,
whose header links back to the task's solve; the text of a sub-solve (its goal, answer or
reason: a model's words) is escaped."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import httpx
from workflows.test_subsolve import GOAL, Router, World, scripted

import dagagent
from dagagent.store import RunStore
from ui import runs as made
from ui.conftest import Server


def _solve(path: Path) -> dagagent.Solution:
    async def go() -> dagagent.Solution:
        async with scripted(Router(), 6) as llm:
            return await dagagent.solve(
                GOAL, World().registry, llm, sub_solves=True, store=path, stream=False
            )

    return anyio.run(go)


def test_the_solve_page_links_each_task_to_its_sub_solves(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    solution = _solve(path)
    run_id = solution.run_id or ""
    with RunStore(path) as st:
        children = sorted(st.child_solves(solution.solve_id), key=lambda c: c.link.element or 0)
        # a hostile answer of a child is shown as text
        st.finish_solve(children[1].solve_id, status="answered", answer=f"Bolt {made.XSS}")
    eu, us = (c.solve_id for c in children)
    with Server(path) as server, httpx.Client(base_url=server.url) as client:
        page = client.get(f"/solves/{solution.solve_id}").text
        links = re.findall(r'class="child-solve" href="/solves/([0-9a-f]+)"', page)
        child = client.get(f"/solves/{links[1]}")
        listed = client.get("/").text
    assert links == [eu, us]
    assert re.search(r'data-fact="sub-solves">4 · ', page)
    assert f'id="sub-{run_id}-best"' in page  # the task's row in the timeline leads here
    assert f'<a href="#sub-{run_id}-best">' in page
    assert "Bolt &lt;script&gt;alert(1)&lt;/script&gt;" in page and made.XSS not in page
    assert child.status_code == 200
    text = child.text
    assert "A sub-solve (depth 1) of task <code>best</code> (element 1)" in text
    assert f'href="/solves/{solution.solve_id}"' in text and f'href="/runs/{run_id}"' in text
    assert "Find the best steel supplier in US" in text
    # the list of solves says which are sub-solves, and whose
    assert listed.count(f'a sub-solve of solve <a href="/solves/{solution.solve_id}">') == 2
