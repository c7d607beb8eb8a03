#!/usr/bin/env python3
"""Golden data for sdrt's flatten / unflatten / set_element (core/state_dict/flatten.h).

Run BY HAND (never in CI) with PyTorch:

    VENV/bin/python tests/golden/make_state_dict_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

It runs PyTorch's own `_flatten_state_dict`, `_unflatten_state_dict` and `_set_element`
from torch/distributed/_state_dict_utils.py on small inputs and writes what they return or
raise to tests/data/state_dict/flatten_golden.json: a list of cases, each

  {"id", "op", "input", "flat", "mapping", "unflattened", "steps", "error"}

  op "flatten"      input -> _flatten_state_dict -> flat, mapping; then
                    _unflatten_state_dict(flat, mapping) -> unflattened
  op "unflatten"    flat, mapping given -> _unflatten_state_dict -> unflattened
  op "set_element"  steps [[path, value, state after the step], ...] on one root dict,
                    starting from `input`

Values use the shared golden encoding (tests/support/golden_codec.h, written by
golden_encode.py); a mapping is a list of [key, path] pairs in order, a path a list of
strings and integers. `error` is null or
{"class": exception class name, "message": str(exception)}; a failing step ends `steps`.
"""
import io
import json
import math
from pathlib import Path

import torch
from torch.distributed._state_dict_utils import (
    _flatten_state_dict,
    _set_element,
    _unflatten_state_dict,
)

from golden_encode import arange_tensor as t
from golden_encode import encode

OUT = Path(__file__).resolve().parents[1] / "data" / "state_dict" / "flatten_golden.json"


def encode_mapping(mapping):
    for path in mapping.values():
        assert all(type(p) in (str, int) for p in path), path
    return [[k, list(path)] for k, path in mapping.items()]


def error_of(e):
    return {"class": type(e).__name__, "message": str(e)}


def flatten_cases():
    w = t(2, 3)
    return [
        # docs/SEMANTICS.md 4.2: the empty dict "e" vanishes, None is a leaf, int key 5 becomes "5".
        ("spec_4_2_example",
         {"a": {"b": 1, "c": [2, (3, 4)], "e": {}}, 5: {"x": None}, "t": (7,)}),
        # case-030: keys depend on container contents; an empty list flattens to nothing.
        ("case_030_A", {"my_key": [{"key_1": 1}, {"key_2": 2}]}),
        ("case_030_B", {"my_key": []}),
        # case-031: a key containing the separator round-trips through its path.
        ("case_031_dotted_key", {"a.b": 1, "c": {"d": 2}}),
        ("case_031_dotted_nested_key", {"m": {"w.b": {"c": 1}}, "n": [{"x.y": 2}]}),
        # case-032: tuples flatten like lists and come back as lists.
        ("case_032_tuple_and_list", {"t": (10, 20), "l": [None, 5]}),
        ("empty_list_in_list", {"a": [[], 1]}),
        ("nested_lists_with_none", {"x": [[None, [1, None]], None, [[[]], {"k": None}]]}),
        ("empty_root", {}),
        ("only_empty_containers", {"a": {}, "b": [], "c": (), "d": {"e": [{}]}}),
        ("list_index_order", {"l": list(range(12))}),
        ("int_keys", {0: {1: "a", "2": [3]}, -4: {"z": 5}}),
        ("empty_string_keys", {"": {"": 1}, "x": {"": [2]}}),
        ("scalar_leaves",
         {"none": None, "t": True, "f": False, "i": -(2 ** 63), "big": 2 ** 63 - 1,
          "x": 1.5, "tiny": 5e-324, "nan": math.nan, "inf": math.inf, "ninf": -math.inf,
          "s": "caf\u00e9", "b": b"\x00\xff", "io": io.BytesIO(b"abc")}),
        ("tensor_leaves",
         {"f32": t(2, 3), "bf16": t(3, dtype=torch.bfloat16), "i64": t(2, 2, dtype=torch.int64),
          "bool": torch.tensor([True, False]), "scalar": torch.tensor(2.5),
          "empty": torch.zeros(0, 3), "meta": torch.empty(4, 2, device="meta"),
          "shared": [w, (w, w)]}),
        ("optimizer_like",
         {"state": {0: {"exp_avg": t(2), "step": torch.tensor(3.0)}, 1: {"exp_avg": t(3)}},
          "param_groups": [{"params": [0, 1], "lr": 0.1, "betas": (0.9, 0.999)}]}),
        # Collisions raise ValueError("duplicated flatten key ...").
        ("collision_dotted_then_nested", {"a.b": 1, "a": {"b": 2}}),
        ("collision_nested_then_dotted", {"a": {"b": 2}, "a.b": 1}),
        ("collision_list_index", {"a": [5], "a.0": 6}),
        # Python can hold both 1 and "1"; sdrt's string-keyed Map cannot (see README).
        ("collision_int_and_str_key", {1: "x", "1": "y"}),
    ]


def unflatten_cases():
    return [
        ("missing_mapping_key", {"a": 1, "b": 2}, {"a": ("a",)}),
        ("extra_mapping_keys_ignored", {"a": 1}, {"z": ("z",), "a": ("a",)}),
        ("flat_order_decides_dict_order", {"b": 2, "a": 1}, {"a": ("a",), "b": ("b",)}),
        ("list_filled_by_index", {"l.2": 2, "l.0": 0}, {"l.0": ("l", 0), "l.2": ("l", 2)}),
        ("none_hole_replaced_by_container", {"l.3": 3, "l.1.x": 1},
         {"l.3": ("l", 3), "l.1.x": ("l", 1, "x")}),
        ("same_path_twice_last_wins", {"a": 1, "b": 2}, {"a": ("k",), "b": ("k",)}),
        ("through_a_leaf", {"a": 1, "a.b": 2}, {"a": ("a",), "a.b": ("a", "b")}),
        ("through_a_list_leaf", {"l.0": 5, "l.0.x": 6}, {"l.0": ("l", 0), "l.0.x": ("l", 0, "x")}),
        ("string_key_into_list", {"l.0": 1, "l.x": 2}, {"l.0": ("l", 0), "l.x": ("l", "x")}),
        ("int_key_into_small_dict", {"d.k": 1, "d.3": 2}, {"d.k": ("d", "k"), "d.3": ("d", 3)}),
        ("int_key_into_large_dict", {"d.k": 1, "d.j": 2, "d.0": 3},
         {"d.k": ("d", "k"), "d.j": ("d", "j"), "d.0": ("d", 0)}),
        ("int_key_into_dict_on_the_way", {"d.k": 1, "d.0.x": 2},
         {"d.k": ("d", "k"), "d.0.x": ("d", 0, "x")}),
        ("int_key_at_root", {"a": 1, "0": 2}, {"a": ("a",), "0": (0,)}),
        ("int_key_at_empty_root", {"0": 2}, {"0": (0,)}),
        ("negative_index", {"l.0": 1, "l.1": 2, "l.-1": 3},
         {"l.0": ("l", 0), "l.1": ("l", 1), "l.-1": ("l", -1)}),
        ("negative_index_on_the_way", {"l.0": None, "l.-1.x": 3},
         {"l.0": ("l", 0), "l.-1.x": ("l", -1, "x")}),
        ("negative_index_too_small", {"l.0": 1, "l.-2": 3}, {"l.0": ("l", 0), "l.-2": ("l", -2)}),
        ("through_a_tuple", {"t": (1, {"x": 1}), "t.1.y": 2}, {"t": ("t",), "t.1.y": ("t", 1, "y")}),
        ("into_a_tuple", {"t": (1,), "t.0": 5}, {"t": ("t",), "t.0": ("t", 0)}),
        ("tuple_none_hole", {"t": (None,), "t.0.x": 5}, {"t": ("t",), "t.0.x": ("t", 0, "x")}),
        ("empty_path", {"a": 1}, {"a": ()}),
    ]


# docs/SEMANTICS.md 4.3 / PyTorch test_traverse.py test_set_element, on one root.
SET_ELEMENT_STEPS = [
    (("k",), 10), (("k1", 2), 1), (("k1", 1), 99), (("k1", 3), 88), (("k2", "k3"), 3),
    (("k2", "k4", 0, 0), 99),
]


def run_flatten(case_id, sd):
    case = {"id": case_id, "op": "flatten", "input": encode(sd), "flat": None, "mapping": None,
            "unflattened": None, "steps": None, "error": None}
    try:
        flat, mapping = _flatten_state_dict(sd)
    except Exception as e:  # noqa: BLE001 - recording what PyTorch raises
        case["error"] = error_of(e)
        return case
    case["flat"] = encode(flat)
    case["mapping"] = encode_mapping(mapping)
    case["unflattened"] = encode(_unflatten_state_dict(flat, mapping))
    return case


def run_unflatten(case_id, flat, mapping):
    case = {"id": case_id, "op": "unflatten", "input": None, "flat": encode(flat),
            "mapping": encode_mapping(mapping), "unflattened": None, "steps": None, "error": None}
    try:
        case["unflattened"] = encode(_unflatten_state_dict(flat, mapping))
    except Exception as e:  # noqa: BLE001
        case["error"] = error_of(e)
    return case


def run_set_element(case_id, root, steps):
    case = {"id": case_id, "op": "set_element", "input": encode(root), "flat": None,
            "mapping": None, "unflattened": None, "steps": [], "error": None}
    for path, value in steps:
        try:
            _set_element(root, path, value)
        except Exception as e:  # noqa: BLE001
            case["error"] = error_of(e)
            case["steps"].append([list(path), encode(value), None])
            break
        case["steps"].append([list(path), encode(value), encode(root)])
    return case


def main():
    cases = [run_flatten(cid, sd) for cid, sd in flatten_cases()]
    cases += [run_unflatten(cid, flat, mapping) for cid, flat, mapping in unflatten_cases()]
    cases.append(run_set_element("set_element_spec_4_3", {}, SET_ELEMENT_STEPS))
    cases.append(run_set_element("set_element_through_leaf", {"a": 1}, [(("a", "b"), 2)]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(cases, indent=1, allow_nan=False) + "\n"
    OUT.write_text(text)
    errors = sum(c["error"] is not None for c in cases)
    print(f"wrote {OUT} ({len(cases)} cases, {errors} with errors, {len(text)} bytes)")


if __name__ == "__main__":
    main()
