"""A SimulEval 1.1.4 text-to-text agent that runs this engine under any policy spec.

    simuleval --agent-class simulmt.eval.simuleval_agent.SimulmtAgent \\
        --source src.txt --target ref.txt --policy wait-k:k=3 [--model DIR] [--beam N] \\
        [--loop-guard N] [--precision int8] --output out/

or ``--agent path/to/simuleval_agent.py`` (the class registers itself with ``@entrypoint``;
add ``--agent-class agents.SimulmtAgent`` only if other entry points are loaded too).

SimulEval sends one source word per call and counts every WriteAction as written after the
words sent so far; a second WriteAction would cost another source word. So all the words our
session commits at one source position go out as ONE WriteAction, space-joined. Once the
source is complete, the rest of the translation is written in one final WriteAction.

The search and session options (beam, scoring, speculation, coverage, write unit, loop guard,
premature stops, segmentation, input kind, fillers, number notation, precision) are
`simulmt eval`'s, added by the same function with the
same defaults, and each line's session is opened as the evaluator opens it: the two give the
same output and delays on every line. Only the precision's flag differs, ``--precision``:
SimulEval owns ``--dtype``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simuleval.agents import TextToTextAgent
from simuleval.agents.actions import Action, ReadAction, WriteAction
from simuleval.agents.states import AgentStates
from simuleval.utils import entrypoint
from simulmt.eval.options import RunConfig
from simulmt.eval.runner import open_session
from simulmt.policies.files import load_policy_files
from simulmt.policies.registry import load_policy

from simulmt.cli.options import (
    add_policy_argument,
    add_policy_file_argument,
    add_search_arguments,
    add_session_arguments,
    search_settings,
    session_settings,
)
from simulmt.defaults import DEFAULT_POLICY
from simulmt.engine import Engine
from simulmt.session import Session, advance

__all__ = ["SimulmtAgent"]


@entrypoint
class SimulmtAgent(TextToTextAgent):
    """Streams SimulEval's source words into a `Session` and hands back its committed words."""

    def __init__(self, args: argparse.Namespace) -> None:
        load_policy_files(args.policy_file)
        load_policy(args.policy)  # a bad spec fails here with the accepted grammar
        self.policy_spec: str = args.policy
        self.config = RunConfig(**search_settings(args), **session_settings(args))
        # `auto` resolves as in `simulmt eval` (a turn as wide as its default batch), not for
        # this agent's one sentence at a time: the two must run one precision and agree
        self.engine = Engine.load(
            Path(args.model) if args.model else None, dtype=args.precision,
            turn_streams=RunConfig.batch_size,
        )  # fmt: skip
        self.session: Session | None = None
        self.fed = 0  # source words of the current sentence given to the session
        super().__init__(args)  # builds the states and calls reset()

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        add_policy_argument(parser, default=DEFAULT_POLICY)
        add_policy_file_argument(parser)
        parser.add_argument("--model", default=None, help="simulmt model folder (default bundled)")
        add_search_arguments(parser, dtype_flag="--precision")  # SimulEval owns --dtype
        add_session_arguments(parser, old_spellings=False)  # as `simulmt eval` opens sessions

    def reset(self) -> None:
        super().reset()
        self.session = open_session(self.engine, self.policy_spec, self.config, tentative=False)
        self.fed = 0

    def policy(self, states: AgentStates | None = None) -> Action:
        states = states if states is not None else self.states
        assert self.session is not None
        new = states.source[self.fed :]
        if new:
            self.session.feed(" ".join(new))
            self.fed += len(new)
        if states.source_finished:
            self.session.end_source()
        words = self._advance()
        if states.source_finished:
            while not self.session.idle:  # finish every sentence of the line (normally done)
                more = self._advance()
                if not more:
                    break
                words += more
            # SimulEval loops forever on a READ after the source ended: always finish here
            return WriteAction(" ".join(words), finished=True)
        return WriteAction(" ".join(words), finished=False) if words else ReadAction()

    def _advance(self) -> list[str]:
        """Model work until the session waits for input; the words it committed meanwhile.

        A line may hold several sentences (the session splits at . ! ?): the final update of
        one of them does not end the line, only the end of SimulEval's source does.
        """
        assert self.session is not None
        (updates,) = advance(self.engine, [self.session])
        return [w for u in updates for w in u.committed_delta.split()]
