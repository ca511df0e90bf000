"""Recipes: the typed model, the loader that keeps TOML positions, and the rules that judge them."""

from stackctl.recipe.loader import load_recipe, load_recipe_text
from stackctl.recipe.model import Recipe

__all__ = ["Recipe", "load_recipe", "load_recipe_text"]
