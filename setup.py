from setuptools import find_packages, setup

setup(
    name="rcgrpo_jax",
    version="0.1.0",
    description="JAX/Flax RL for multi-turn tool-calling agents: RC-GRPO and the GRPO family on BFCL v4.",
    packages=find_packages(include=["rcgrpo_jax", "rcgrpo_jax.*"]),
    package_data={"rcgrpo_jax.data": ["*.json"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10,<0.13",  # 0.10 (the CPU installs, Python 3.11), 0.11 (the GPU test box) and 0.12
        "flax>=0.12",
        "optax",
        "orbax-checkpoint",
        "transformers>=4.50",
        "tokenizers",
        "chex",
        "ml-collections",
        "absl-py",
        "safetensors",
        "numpy",
        "tensorboardX",
        "tqdm",
        "matplotlib",
        "mpmath",
    ],
    extras_require={
        # pyarrow reads MMLU-Pro's released parquet files (eval.suite=mmlu_pro; imported only there, JSON lines need
        # nothing): the tests write parquet fixtures; the GPU image holds it. tokamax: the CPU tests of
        # attention_impl=tokamax and decode_attention=tokamax (its XLA reference implementation). tokamax pins:
        # 0.0.13 and later (the Triton kernels without pl.dot, which jax 0.11 removed) are served for Python
        # >= 3.12 only; 0.0.12 stays where Python is older (docs/gpu.md, "tokamax releases").
        "test": [
            "pytest",
            "pytest-xdist",
            "hypothesis",
            "ruff==0.17.6",
            "pyarrow",
            'tokamax==0.0.12;python_version<"3.12"',
            'tokamax==0.0.17;python_version>="3.12"',
        ],
        # transformers' `serving` extra without torch (the CPU setup installs the torch wheel first; the GPU
        # environments never install torch): `transformers serve`, the real OpenAI-compatible server that
        # tests/judges/test_http_serve.py runs the http judge against. launch/setup_env.sh (CPU) installs it.
        "serving": ["fastapi", "uvicorn", "starlette", "rich", "openai>=1.98.0", "accelerate>=1.1.0"],
        # CUDA jax (pip-installed CUDA 13 libraries; launch/setup_env.sh --gpu). gpu-cuda12 for drivers < 580.
        "gpu": [
            "jax[cuda13]>=0.10,<0.13",
            'tokamax==0.0.12;python_version<"3.12"',
            'tokamax==0.0.17;python_version>="3.12"',
        ],
        "gpu-cuda12": [
            "jax[cuda12]>=0.10,<0.13",
            'tokamax==0.0.12;python_version<"3.12"',
            'tokamax==0.0.17;python_version>="3.12"',
        ],
        # Benchmark peers only, each in its own env built by launch/bench_env.sh (tunix pins an older
        # transformers than the project's); never imported by the package.
        "bench-trl": ["trl==1.16.0"],
        "bench-tunix": ["google-tunix==0.1.7"],
    },
)
