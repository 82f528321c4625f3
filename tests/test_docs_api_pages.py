"""The API pages' hook (``docs/hooks/api_pages.py``): a docstring's Sphinx role, which the pages showed raw
(``:meth:<code>x</code>``, 736 of them), becomes its name in code, linked where it names a project object; the index
links every module."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from tests.pipelines.conftest import REPO

spec = importlib.util.spec_from_file_location("api_pages", REPO / "docs" / "hooks" / "api_pages.py")
api_pages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(api_pages)


def _page(uri: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=uri))


def test_roles_become_linked_code_on_the_api_pages_only():
    html = ("<p>see :class:<code>modules.base.RLModule</code>, :meth:<code>~envs.dvrp.plan.schedule</code>, "
            ":attr:<code>collector_policy</code> and :func:<code>modules.policy.exportable()</code></p>")
    out = api_pages.on_page_content(html, _page("api/modules.md"), None, None)
    assert ":class:" not in out and ":meth:" not in out and ":attr:" not in out
    assert '<a href="../modules/#modules.base.RLModule"><code>modules.base.RLModule</code></a>' in out
    assert '<a href="../envs.dvrp/#envs.dvrp.plan.schedule"><code>schedule</code></a>' in out  # (~: the last name)
    assert "<code>collector_policy</code>" in out and 'href="../modules/#collector_policy"' not in out
    assert api_pages.on_page_content(html, _page("running.md"), None, None) == html


def test_the_index_links_every_module_to_its_entry():
    index = api_pages.index()
    assert "[`acting`](modules.md#modules.acting)" in index
    assert "[`local_search`](envs.dvrp.md#envs.dvrp.local_search)" in index
