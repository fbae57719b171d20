"""The type stubs and the module name the same public things."""
import ast
import pathlib

import sluice

STUBS = pathlib.Path(sluice.__file__).with_name("__init__.pyi")


def public_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def test_the_stubs_name_what_the_module_has():
    assert public_names(ast.parse(STUBS.read_text())) == set(sluice.__all__)
    for name in sluice.__all__:
        assert hasattr(sluice, name)


def test_every_public_call_has_a_docstring():
    for cls in (sluice.Gate, sluice.MutexGate, sluice.Pool, sluice.MutexPool, sluice.Buffer, sluice.Limiter,
                sluice.TimedPermit, sluice.AIMD, sluice.Vegas, sluice.Gradient2):
        for name in dir(cls):
            if not name.startswith("_"):
                assert getattr(cls, name).__doc__, f"{cls.__name__}.{name}"
