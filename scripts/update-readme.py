"""Regenerate the recipe reference in README.md from stackctl/recipe/model.py (the test keeps them in step)."""

from pathlib import Path

from stackctl.recipe.schema import markdown_reference

START, END = "<!-- recipe-reference:start -->\n", "<!-- recipe-reference:end -->"
readme = Path(__file__).resolve().parent.parent / "README.md"
head, rest = readme.read_text().split(START)
_, tail = rest.split(END)
readme.write_text(head + START + markdown_reference() + END + tail)
print(f"updated {readme}")
