"""Family manifests: what each model family offers on the command line, declared without TensorFlow.

Each module here is one family's manifest (see :mod:`kerasplm.registry`): its job and command options
(frozen dataclasses, :mod:`kerasplm.options`), and ``COMMANDS``. The registry imports every
module of this package, so a new family adds a module and edits nothing else. A manifest imports only
:mod:`kerasplm.options` and :mod:`kerasplm.registry`: ``kerasplm --help`` reads every manifest and must not
import TensorFlow.
"""
