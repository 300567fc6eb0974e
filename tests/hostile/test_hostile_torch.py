"""Hostile torch tensors through ``from_torch`` and the bridged ops. torch checks no sparse
invariant by default, so each case runs in a subprocess: a crash is a failed case."""
from __future__ import annotations

import json

import pytest

from _subprocess import run_case

pytest.importorskip("torch")

_HEAD = """
import warnings
warnings.simplefilter("ignore")
import torch
import sparse_ops.torch as st
"""


def _case(make: str) -> dict:
    """One fresh process: the tensor ``make`` builds through ``from_torch`` and through a
    bridged op, each refusal's message printed, then torch's autograd through the bridge
    must still work."""
    return run_case(_HEAD + f"""
import json
said = {{}}
for where, call in (("from_torch", lambda t: st.from_torch(t).asnumpy()), ("op", lambda t: st.ops.sum(t))):
    try:
        call({make})
        said[where] = None
    except Exception as exc:
        said[where] = f"{{type(exc).__name__}}: {{exc}}"
x = torch.ones(3, requires_grad=True)
st.ops.sum(st.ops.square(x)).backward()
assert x.grad.tolist() == [2.0, 2.0, 2.0]
print(json.dumps(said))
""")


CASES = {
    # a -1 row (a common padding id): torch's coalesce corrupts its heap on it
    "coo negative row": ("torch.sparse_coo_tensor(torch.tensor([[-1, 2]]), torch.ones(2, 3), (5, 3))",
                         "COO row index -1 at position 0 is out of range [0, 5)"),
    "coo row past the end": ("torch.sparse_coo_tensor(torch.tensor([[0, 7, 7]]), torch.ones(3, 3), (5, 3))",
                             "COO row index 7 at position 1 is out of range [0, 5)"),
    "coo huge negative row": ("torch.sparse_coo_tensor(torch.tensor([[2, -2**40]]), torch.ones(2, 3), (5, 3))",
                              "COO row index -1099511627776"),
    "csr column past the end": ("torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1 << 40]), "
                                "torch.ones(2), (2, 3), check_invariants=False)", "out of range [0, 3)"),
    "csr negative column": ("torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, -3]), "
                            "torch.ones(2), (2, 3), check_invariants=False)", "csr column index -3"),
    "csr indptr past the values": ("torch.sparse_csr_tensor(torch.tensor([0, 1003, 3]), torch.tensor([0, 1, 2]), "
                                   "torch.ones(3), (2, 3), check_invariants=False)", "non-decreasing"),
    "csr unsorted columns": ("torch.sparse_csr_tensor(torch.tensor([0, 2]), torch.tensor([2, 0]), torch.ones(2), "
                             "(1, 3), check_invariants=False)", "unsorted index 0 after 2 in row 0"),
    "csr repeated column": ("torch.sparse_csr_tensor(torch.tensor([0, 2]), torch.tensor([1, 1]), torch.ones(2), "
                            "(1, 3), check_invariants=False)", "duplicate index 1 after 1 in row 0"),
    "nested tensor": ("torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])",
                      "nested tensors have no sparse-ops storage type"),
    "bool values": ("torch.tensor([True, False])", "arrays of dtype torch.bool are not supported"),
    "complex values": ("torch.ones(2, dtype=torch.complex64)", "arrays of dtype torch.complex64 are not supported"),
    "csc layout": ("torch.eye(3).to_sparse_csc()", "layout sparse_csc has no sparse-ops storage type"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_hostile_tensor_is_refused_naming_what_is_wrong(case):
    import json

    make, words = CASES[case]
    r = _case(make)
    assert r["outcome"] == "returned", (case, r)  # no crash; the process and torch's autograd still work
    said = json.loads(r["stdout"].strip().splitlines()[-1])
    for where in ("from_torch", "op"):
        assert said[where] is not None and words in said[where], (case, where, said[where])
    assert "from_torch" in said["from_torch"]
    assert "'sum'" in said["op"] or "ops.sum" in said["op"], said["op"]  # names the op
    assert "'data'" in said["op"], said["op"]  # and the argument


def test_a_meta_tensor_is_refused_by_from_torch_and_gives_a_meta_result_from_an_op():
    r = run_case(_HEAD + """
y = st.ops.sum(torch.ones(3, 4, device="meta"))
assert y.device.type == "meta" and tuple(y.shape) == ()
try:
    st.from_torch(torch.ones(3, device="meta"))
except st.TorchBridgeError as exc:
    print(exc)
""")
    assert r["outcome"] == "returned", r
    assert "tensors on device meta are not supported (cpu and cuda are)" in r["stdout"]


@pytest.mark.parametrize("parts, words", [
    ("st.CSRParts(torch.ones(3), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2, 3]), (3, '3'))",
     "CSRParts: shape must be a tuple of non-negative ints with 2 entries, got (3, '3')"),
    ("st.CSRParts(torch.ones(3), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2, 3]), (3, 3, 1))",
     "with 2 entries"),
    ("st.RowSparseParts(torch.ones(2, 2), torch.tensor([1, 3]), (5.5, 2))",
     "RowSparseParts: shape must be a tuple of non-negative ints with at least one entry, got (5.5, 2)"),
    ("st.RowSparseParts(torch.ones(2, 2), torch.tensor([1, 3]), (-5, 2))", "non-negative ints"),
])
def test_component_tuples_with_shapes_no_container_takes_are_refused(parts, words):
    r = run_case(_HEAD + f"""
import json
try:
    st.ops.sum({parts})
    said = None
except Exception as exc:
    said = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps(said))
""")
    assert r["outcome"] == "returned", r
    said = json.loads(r["stdout"].strip().splitlines()[-1])
    assert said is not None and said.startswith("BridgeError") and words in said, said

