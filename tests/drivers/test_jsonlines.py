from longhaul.drivers.jsonlines import json_lines


def test_objects_only_and_cut_lines_skipped():
    text = 'warning: x\n{"a": 1}\n  {"b": 2}  \n{"c": 3\n[1, 2]\n{"t": 1.5, "bytes": 10}\n'
    assert list(json_lines(text)) == [{"a": 1}, {"b": 2}, {"t": 1.5, "bytes": 10}]
    assert list(json_lines("")) == []
