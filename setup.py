from setuptools import find_packages, setup

setup(
    name="rcgrpo_jax",
    version="0.1.0",
    description="JAX/Flax RL for multi-turn tool-calling agents: RC-GRPO and the GRPO family on BFCL v4.",
    packages=find_packages(include=["rcgrpo_jax", "rcgrpo_jax.*"]),
    package_data={"rcgrpo_jax.data": ["*.json"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10,<0.11",
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
        "test": ["pytest", "pytest-xdist", "hypothesis", "ruff==0.17.6"],
    },
)
