"""The recipe: what deploy.toml declares (schema), how it is read (load), and where a field lives (locate)."""

from modelbuild.recipe.load import LoadedRecipe, load_recipe
from modelbuild.recipe.schema import Recipe

__all__ = ["LoadedRecipe", "Recipe", "load_recipe"]
