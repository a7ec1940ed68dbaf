"""Typed, frozen dataset options shared by the CLI and recipes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DatasetConfig(BaseModel):
    """Which examples to evaluate.

    Attributes:
        spec: ``hf:<hub name or local file/dir>``, ``builtin:<name>``, or a local path.
        split: Split to read (``test`` by default: robustness is measured on held-out data).
        config: Hub dataset configuration name (``sst2`` for ``glue``).
        revision: Hub dataset revision.
        n: Evaluate a deterministic subsample of n examples (chosen by the run seed); all if unset.
        text_column / image_column / label_column: Column names; auto-detected when unset.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    split: str = "test"
    config: str | None = None
    revision: str | None = None
    n: int | None = Field(None, gt=0, strict=True)
    text_column: str | None = None
    image_column: str | None = None
    label_column: str | None = None

    @model_validator(mode="after")
    def _columns(self) -> DatasetConfig:
        label = self.label_column
        for flag, column in (("text_column", self.text_column), ("image_column", self.image_column)):
            if column is not None and label is not None and column == label:
                raise ValueError(f"{flag} and label_column are both {column!r}: the input cannot be its own label")
            if column is not None and label is None and column == "label":
                raise ValueError(f"{flag} is 'label', the column labels are read from (name the label column with "
                                 "label_column if it is another one)")
        named = [flag for flag, column in (("text_column", self.text_column), ("image_column", self.image_column),
                                          ("label_column", label)) if column is not None]
        if named and self.spec.startswith(("builtin:", "memory:")):
            raise ValueError(f"{', '.join(named)} apply to hf: datasets; {self.spec} has fixed columns")
        chosen = [flag for flag, value in (("config", self.config), ("revision", self.revision)) if value is not None]
        if chosen and self.spec.startswith(("builtin:", "memory:")):  # it was ignored without a word
            raise ValueError(f"{', '.join(chosen)} apply to hf: datasets; {self.spec} has one configuration and "
                             "revision")
        return self
