"""Print cpe's version from src/cpe/_version.py, without building or importing cpe
(the release workflow compares it with the release's tag)."""

import ast
import pathlib

source = pathlib.Path(__file__).resolve().parents[1] / "src" / "cpe" / "_version.py"
for node in ast.parse(source.read_text()).body:
    if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__version__"]:
        print(ast.literal_eval(node.value))
        break
else:
    raise SystemExit(f"no __version__ = ... in {source}")
