"""Run directories themselves (not a model family): ``kerasplm convert run`` upgrades a run of an earlier format."""
import dataclasses

from kerasplm.options import JobOptions, option
from kerasplm.registry import Command


@dataclasses.dataclass(frozen=True)
class ConvertRunOptions(JobOptions):
    """``kerasplm convert run``: an old run directory -> a copy in the current run format."""
    source: str = option(None, "the run directory of an earlier kerasplm (run format 1 or 2)", flag="--from",
                         metavar="RUN_DIR", required=True)
    out: str = option(None, "the new run directory to write (must not exist or be empty)", metavar="RUN_DIR",
                      required=True)


COMMANDS = [
    Command("convert", "run", "a run directory of an earlier kerasplm -> the current run format", ConvertRunOptions,
            "kerasplm.runs.convert:convert_run_command",
            description="Copy an old run directory (checkpoints, assets, history) to --out with a config.json in "
                        "the current format, which stores the task model's and preprocessor's Keras configs. "
                        "The old directory is left as it was."),
]
