"""The `stackctl` command: a click group whose subcommands load only when called (keeps start-up light).

One exit point: user errors (StackctlError) print one line and exit with their code; click's usage errors (an
unknown option, a bad value) exit 1 like any other user error; Ctrl-C exits 130; anything else is a bug, exit 70,
and prints a traceback only with --debug.
"""

from __future__ import annotations

import gc
import sys

from stackctl.errors import ExitCode, StackctlError

# The exit statuses of every command (errors.ExitCode), the top-level --help's epilog. `\b` keeps click from
# rewrapping the lines.
EXIT_STATUS_HELP = f"""\b
Exit status:
  {ExitCode.OK:<3} success
  {ExitCode.FAILED:<3} user error: bad input or usage, a rule error, a failed check, gate or rollout
  {ExitCode.COULD_NOT_RUN:<3} could not run: no Docker engine, no Ansible, a host tool failed
  {ExitCode.INTERNAL:<3} internal error, a bug in stackctl (--debug shows the traceback)
  {ExitCode.INTERRUPTED:<3} interrupted (Ctrl-C)
"""

# name -> (module, attribute, one-line help). The help is here so `stackctl --help` imports no subcommand.
COMMANDS = {
    "validate": ("stackctl.cli.validate", "validate", "Check recipes against the schema and the rule catalog."),
    "explain": ("stackctl.cli.catalog", "explain", "Show the doc page of a rule or check id."),
    "rules": ("stackctl.cli.catalog", "rules", "List the rule catalog."),
    "init": ("stackctl.cli.init", "init", "Write a commented recipe from a preset or an existing launch command."),
    "schema": ("stackctl.cli.catalog", "schema", "Print the JSON Schema of the recipe format."),
    "plan": ("stackctl.cli.plan", "plan", "KV-cache capacity plan and regime advice for a recipe."),
    "render": ("stackctl.cli.render", "render", "Write the deployment bundle (Dockerfile, serve.sh, ...)."),
    "build": ("stackctl.cli.run", "build", "Build the stack's image."),
    "up": ("stackctl.cli.run", "up", "Build if needed, start the stack and wait until healthy."),
    "rollback": ("stackctl.cli.run", "rollback", "Return a stack to its previous deployment."),
    "down": ("stackctl.cli.run", "down", "Stop and remove the stack's container."),
    "status": ("stackctl.cli.run", "status", "Show containers, images, recipe hash and health."),
    "logs": ("stackctl.cli.run", "logs", "Show the server log of a stack."),
    "doctor": ("stackctl.cli.doctor", "doctor", "Prove the stack is what the recipe says (host, image, server)."),
    "fleet": ("stackctl.cli.fleet", "fleet", "Roll a recipe out to a fleet, or check a fleet, with Ansible."),
    "bench": ("stackctl.cli.bench", "bench", "Measure what the cache buys: cold/warm probe and arm comparison."),
}


def _build_cli():
    """The click group (built on demand: importing click costs more than a whole `validate` run)."""
    import importlib

    import click

    from stackctl import __version__

    class LazyGroup(click.Group):
        """A group that imports a subcommand's module only when that subcommand runs."""

        def list_commands(self, ctx):
            return list(COMMANDS)

        def get_command(self, ctx, name):
            if name not in COMMANDS:
                return None
            module_name, attribute, _ = COMMANDS[name]
            return getattr(importlib.import_module(module_name), attribute)

        def format_commands(self, ctx, formatter):
            rows = [(name, help_text) for name, (_, _, help_text) in COMMANDS.items()]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_STATUS_HELP)
    @click.version_option(__version__, prog_name="stackctl")
    @click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
    @click.pass_context
    def cli(ctx, debug):
        """Build, run and prove ROCm LLM inference stacks from a recipe.

        A recipe (TOML) says what the stack is: model, engine (vLLM, optionally with AMD's ATOM plugin), KV-cache tiers
        and tuning. stackctl builds the image the right way, launches it pinned to the right NUMA node, and checks that
        the running stack is what the recipe says before traffic arrives.
        """
        ctx.obj = {"debug": debug}

    return cli


def main(argv=None) -> None:
    """The program: argv None reads the process's command line (and the process ends with this call)."""
    short_run = argv is None and sys.argv[1:2] == ["validate"]
    argv = list(sys.argv[1:] if argv is None else argv)
    if short_run:
        # `validate` as the program is a process of a few tens of milliseconds whose garbage is freed at exit: the
        # cyclic collector stays off (its passes over the objects the imports and facts files make cost ~2 ms), and
        # before exit every object moves to its permanent generation, which the shutdown collections skip (~4 ms).
        # Memory is freed all the same; validate holds no file open for writing that a collection would close.
        gc.disable()
    debug = "--debug" in argv
    try:
        _run(argv)
    except SystemExit:
        if short_run:
            gc.freeze()
        raise
    except StackctlError as exc:
        print(f"stackctl: {exc}" if "\n" not in str(exc) else str(exc), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("stackctl: interrupted", file=sys.stderr)
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as exc:  # a bug in stackctl, not the user's fault
        import click

        if isinstance(exc, click.exceptions.Abort):
            print("stackctl: interrupted", file=sys.stderr)
            sys.exit(ExitCode.INTERRUPTED)
        if isinstance(exc, click.ClickException):  # click's own exit code for a usage error is 2: ours is 1
            exc.show()
            sys.exit(ExitCode.FAILED if isinstance(exc, click.UsageError) else exc.exit_code)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if debug:
            raise
        print(f"stackctl: internal error: {type(exc).__name__}: {exc} (run with --debug for a traceback)",
              file=sys.stderr)
        sys.exit(ExitCode.INTERNAL)


def _run(argv: list) -> None:
    """Run one command. `validate` takes a click-free fast path when its arguments are plain."""
    if argv[:1] == ["validate"]:
        from stackctl.validation import parse_fast_args, validate_and_report

        parsed = parse_fast_args(argv[1:])
        if parsed is not None:
            sys.exit(validate_and_report(*parsed))
    result = _build_cli().main(args=argv, prog_name="stackctl", standalone_mode=False)
    sys.exit(result if isinstance(result, int) else ExitCode.OK)
