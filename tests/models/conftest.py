"""Tiny random HF checkpoints (torch, CPU) shared by the model tests, built once per session."""

from __future__ import annotations

import os

import pytest
import transformers

from tests.helpers.hf_models import build_hf_model


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """arch -> (checkpoint dir, torch model); each built and saved once."""
    built: dict[str, tuple[str, transformers.PreTrainedModel]] = {}

    def get(arch: str):
        if arch not in built:
            model = build_hf_model(arch)
            path = os.fspath(tmp_path_factory.mktemp(arch))
            model.save_pretrained(path)
            built[arch] = (path, model)
        return built[arch]

    return get
