"""Tiny random HF checkpoints (torch, CPU) shared by the model tests, built once per session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """arch -> (checkpoint dir, torch model); each built and saved once. torch is imported only when a test
    asks for one, so the model tests that need no HF oracle also run where torch is absent (the gpu-image
    lane, launch/test.sh)."""
    built: dict[str, tuple] = {}

    def get(arch: str):
        from tests.helpers.hf_models import build_hf_model

        if arch not in built:
            model = build_hf_model(arch)
            path = os.fspath(tmp_path_factory.mktemp(arch))
            model.save_pretrained(path)
            built[arch] = (path, model)
        return built[arch]

    return get
