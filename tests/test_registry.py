"""`rcgrpo_jax.registry`: the one registry shape every swappable part uses."""

import sys

import ml_collections
import pytest

from rcgrpo_jax import registry
from rcgrpo_jax.registry import OptionError, Registry


def _defaults():
    return ml_collections.ConfigDict({"std": "population", "eps": 1e-6})


def _validate(cfg):
    registry.check_choice(cfg, "std", ("population", "sample"))


@pytest.fixture
def reg():
    r = Registry("toy part")

    @r.register("plain")
    def plain():
        return "plain"

    @r.register("tuned", default_config=_defaults, validate=_validate)
    def tuned():
        return "tuned"

    return r


def test_register_get_and_names(reg):
    assert reg.get("plain")() == "plain" and reg.names() == ("plain", "tuned") and "tuned" in reg


def test_an_unknown_name_lists_the_known_ones(reg):
    with pytest.raises(KeyError, match="unknown toy part 'plian'; known: plain, tuned"):
        reg.get("plian")


def test_a_second_registration_needs_override(reg):
    with pytest.raises(ValueError, match="already registered"):
        reg.register("plain")(lambda: "again")
    reg.register("plain", override=True)(lambda: "again")
    assert reg.get("plain")() == "again"


def test_check_merges_defaults_and_validates(reg):
    assert reg.check("tuned", {"std": "sample"}).to_dict() == {"std": "sample", "eps": 1e-6}
    assert len(reg.check("plain")) == 0
    with pytest.raises(OptionError, match="std: 'median' is not one of population, sample") as e:
        reg.check("tuned", {"std": "median"})
    assert e.value.field == "std"
    with pytest.raises(KeyError):  # a misspelt option names itself
        reg.check("tuned", {"stdd": "sample"})


def test_default_config_is_a_fresh_copy(reg):
    reg.default_config("tuned").std = "sample"
    assert reg.default_config("tuned").std == "population"


def test_a_selection_section_holds_each_entrys_options(reg):
    section = registry.selection(reg, "plain")
    assert section.name == "plain" and "tuned" in section and "plain" not in section
    section.name = "tuned"
    section.tuned.std = "sample"
    name, options = registry.selected(reg, section)
    assert name == "tuned" and options.std == "sample"


def test_module_colon_entry_imports_the_users_module(tmp_path, monkeypatch, reg):
    """A user's own entry: "module:entry" imports the module (which registers the entry), then selects it."""
    (tmp_path / "my_toy_part.py").write_text(
        "import sys\n"
        "reg = sys.modules['tests_registry_target']\n"
        "@reg.register('mine')\n"
        "def mine():\n"
        "    return 'mine'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "tests_registry_target", reg)
    name, options = registry.selected(reg, ml_collections.ConfigDict({"name": "my_toy_part:mine"}))
    assert name == "mine" and reg.get(name)() == "mine" and len(options) == 0
    with pytest.raises(ModuleNotFoundError):
        registry.entry_name("no_such_module_here:mine")


def test_lookup_and_check_entry_take_module_colon_entry(tmp_path, monkeypatch, reg):
    """`Registry.lookup` and `check_entry` (an option naming an entry, as a loss's kl_estimator) import a user's
    module first; a module that does not import or an unknown entry is an OptionError naming the option."""
    (tmp_path / "my_other_part.py").write_text(
        "import sys\nreg = sys.modules['tests_registry_target']\nreg.register('theirs')(lambda: 'theirs')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "tests_registry_target", reg)
    assert reg.lookup("plain")() == "plain" and reg.lookup("my_other_part:theirs")() == "theirs"
    cfg = ml_collections.ConfigDict({"part": "my_other_part:theirs"})
    assert registry.check_entry(cfg, "part", reg) == "theirs"
    for value, message in [
        ("no_such_module_here:theirs", "part: cannot import the module of 'no_such_module_here:theirs'"),
        ("my_other_part:nope", "part: 'my_other_part:nope' is not one of plain, theirs, tuned"),
        ("plian", "part: 'plian' is not one of plain, theirs, tuned"),
    ]:
        cfg.part = value
        with pytest.raises(OptionError, match=message) as e:
            registry.check_entry(cfg, "part", reg)
        assert e.value.field == "part"


def test_api_is_the_registrys_own_functions(reg):
    """`Registry.api` hands a module the registry's functions (one line, no copied aliases); `lookup=True` makes
    `get` take "module:entry"."""
    register, get, names, default_config, check = reg.api()
    assert (register, get, names, default_config, check) == (
        reg.register,
        reg.get,
        reg.names,
        reg.default_config,
        reg.check,
    )
    assert reg.api(lookup=True).get == reg.lookup
