"""The recipe: what deploy.toml declares (schema), how it is read (load), and where a field lives (locate).

The schema (pydantic) is imported only to validate a recipe that has no snapshot yet (recipe/snapshot.py).
"""

from modelbuild.recipe.load import LoadedRecipe, load_recipe

__all__ = ["LoadedRecipe", "load_recipe"]
