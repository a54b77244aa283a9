"""The recipe's schema: pydantic models that reject unknown keys, so a typo is never silently ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]
DType = Literal["float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class InputSpec(Strict):
    """One model input, frozen to a static shape before import."""

    shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    dtype: DType = "float32"


class ModelSpec(Strict):
    """An ONNX model and the shapes it is built for."""

    path: str
    inputs: dict[Name, InputSpec] = Field(min_length=1)
    simplify: bool = Field(default=True, description="Simplify with onnxslim before import.")


class BuildSpec(Strict):
    """Which model goes to which targets."""

    model: Name
    targets: list[Name] = Field(min_length=1)


class Recipe(Strict):
    """A whole deploy.toml after its includes are merged."""

    include: list[str] = Field(default_factory=list, description="Recipe pieces merged under this file.")
    models: dict[Name, ModelSpec] = Field(min_length=1)
    targets: dict[Name, dict[str, Any]] = Field(
        min_length=1, description="TVM target JSON per name, e.g. kind = \"llvm\", mcpu = \"host\"."
    )
    builds: list[BuildSpec] = Field(min_length=1)


def json_schema() -> dict:
    """The JSON Schema of deploy.toml, for editors (taplo, Even Better TOML)."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "modelbuild deploy.toml"
    return schema
