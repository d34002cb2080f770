"""One preset registry for every model family.

A family registers its frozen config dataclass presets once, at import of its module::

    register_presets("transformer", Transformer, PRESETS, num_parameters=transformer_num_parameters,
                     listing_overrides={"input_vocab_size": 8000, "target_vocab_size": 8000})

The registry imports a family's preset modules (its manifest's ``PRESET_MODULES``, see
:mod:`kerasplm.registry`) the first time a preset it does not know is asked for, or the whole list is: no
hand-written list of families anywhere. Preset names are unique across families, so ``get_preset("bert_base")`` needs no family. Models load
them with ``Model.from_preset(name, **overrides)`` (:class:`kerasplm.models.base.ConfigMixin`), and
``kerasplm presets`` prints ``list_presets()``. Parameter counts come from each family's
``num_parameters(config)`` formula (no model is built: a 1.5B-parameter preset lists instantly); the
tests check each formula against ``model.count_params()`` on built models.
"""
import dataclasses
import importlib

from kerasplm import registry

_FAMILIES = {}   # family name -> PresetFamily
_PRESETS = {}    # preset name -> family name


@dataclasses.dataclass(frozen=True)
class PresetFamily:
    """A registered family: its model class, presets, and parameter-count formula.

    ``listing_overrides`` fill config fields a preset leaves open (e.g. vocabulary sizes taken from the
    tokenizer at training time) when ``list_presets`` counts parameters.
    """

    name: str
    model_cls: type
    presets: dict
    num_parameters: object
    listing_overrides: dict
    description: str = ""
    parameter_parts: object = None


@dataclasses.dataclass(frozen=True)
class PresetInfo:
    """One row of ``list_presets()``."""

    family: str
    name: str
    config: object
    num_parameters: int
    note: str
    parts: dict = dataclasses.field(default_factory=dict)


def register_presets(family, model_cls, presets, *, num_parameters, listing_overrides=None, description="",
                     parameter_parts=None):
    """Registers (or re-registers, e.g. on module reload) a family's presets.

    Args:
      family: family name, e.g. "transformer", "bert".
      model_cls: the class whose ``from_preset`` builds these configs.
      presets: dict preset name -> frozen config dataclass.
      num_parameters: ``fn(config) -> int``, the exact number of weights of a model of that config.
      listing_overrides: config fields to set before counting parameters in listings.
      parameter_parts: optional ``fn(config) -> {part: int}``, the counts of a model's parts (ELECTRA's
        discriminator and generator), listed after the total.
    """
    for name in presets:
        owner = _PRESETS.get(name)
        if owner is not None and owner != family:
            raise ValueError(f"preset {name!r} of family {family!r} is already registered by family {owner!r}")
    _FAMILIES[family] = PresetFamily(family, model_cls, dict(presets), num_parameters, dict(listing_overrides or {}),
                                     description, parameter_parts)
    for name in presets:
        _PRESETS[name] = family
    return _FAMILIES[family]


_discovered = False


def discover():
    """Import every family's preset modules (once per process), registering their presets."""
    global _discovered
    if not _discovered:
        for module in registry.preset_modules():
            importlib.import_module(module)
        _discovered = True


def get_family(family):
    """The ``PresetFamily`` registered under ``family``."""
    if family not in _FAMILIES:
        discover()
    if family not in _FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {sorted(_FAMILIES)}")
    return _FAMILIES[family]


def preset_family(name):
    """The ``PresetFamily`` that owns preset ``name``."""
    if name not in _PRESETS:
        discover()
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {sorted(_PRESETS)}")
    return _FAMILIES[_PRESETS[name]]


def get_preset(name, **overrides):
    """The config of preset ``name`` (any family) with fields replaced by ``overrides``."""
    family = preset_family(name)
    config = family.presets[name]
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} for preset {name!r} ({type(config).__name__}); "
                         f"expected some of {sorted(fields)}")
    return dataclasses.replace(config, **overrides)


def list_presets(family=None):
    """Every registered preset (of one ``family`` if given) as ``PresetInfo``, sorted by family then size."""
    discover()
    rows = []
    for fam in ([get_family(family)] if family else _FAMILIES.values()):
        for name, config in fam.presets.items():
            counted = dataclasses.replace(config, **fam.listing_overrides)
            parts = {k: int(v) for k, v in (fam.parameter_parts(counted) if fam.parameter_parts else {}).items()}
            note = ", ".join([f"{k}={v}" for k, v in fam.listing_overrides.items()]
                             + [f"{k} {v:,}" for k, v in parts.items()])
            rows.append(PresetInfo(fam.name, name, config, int(fam.num_parameters(counted)), note, parts))
    return sorted(rows, key=lambda r: (r.family, r.num_parameters, r.name))


def format_presets(rows):
    """A plain-text table of ``list_presets()`` rows (what ``kerasplm presets`` prints)."""
    lines = [f"{'family':<12} {'preset':<22} {'parameters':>14}  counted with; parts"]
    for r in rows:
        lines.append(f"{r.family:<12} {r.name:<22} {r.num_parameters:>14,}  {r.note}")
    return "\n".join(lines)
