from stackctl.recipe.positions import index_positions, lookup

DOC = '''# comment
[stack]
name = "x"   # trailing
  platform = "rocm"

[serve]
env = { A = "1", "B.C" = "2" }
extra_args = [
  "--a",
  "--b",
]
compilation_config.pass_config.fuse = true

[[cache.tiers]]
kind = "cpu"

[[cache.tiers]]
kind = "disk"
size_gb = 3
text = """
[not.a.table]
key = 1
"""
after = 1
'''


def test_keys_tables_and_arrays_of_tables_have_positions():
    pos = index_positions(DOC)
    assert pos[("stack",)] == (2, 1)
    assert pos[("stack", "name")] == (3, 1)
    assert pos[("stack", "platform")] == (4, 3)
    assert pos[("serve", "extra_args")] == (8, 1)
    assert pos[("serve", "compilation_config", "pass_config", "fuse")] == (12, 1)
    assert pos[("cache", "tiers", 0, "kind")] == (15, 1)
    assert pos[("cache", "tiers", 1)] == (17, 1)
    assert pos[("cache", "tiers", 1, "size_gb")] == (19, 1)


def test_inline_table_keys_and_multiline_strings():
    pos = index_positions(DOC)
    assert pos[("serve", "env", "A")] == (7, 9)
    assert pos[("serve", "env", "B.C")][0] == 7
    # Text inside a multi-line string is not mistaken for a table or a key.
    assert ("not", "a", "table") not in pos
    assert pos[("cache", "tiers", 1, "after")] == (24, 1)


def test_lookup_falls_back_to_nearest_parent():
    pos = index_positions(DOC)
    assert lookup(pos, ("cache", "tiers", 1, "path")) == (17, 1)
    assert lookup(pos, ("nothing",)) == (1, 1)
