"""`tritonforge serve-eval`: run the evaluation HTTP service (see evaluation.server).

Config precedence: `--config` TOML (a ServerConfig; evaluation defaults under [eval]), then
`--set key=value` overrides (e.g. `--set queue_size=64 --set eval.correctness_trials=3`), then
the explicit flags. Binds 127.0.0.1 unless told otherwise; refuses a non-loopback host without a
token (env TRITONFORGE_EVAL_TOKEN, `--token-file`, or `token` in the config file). A token on the
command line (`--token`, `--set token=...`) is refused: every local user, the candidates'
sandboxed workers included, can read a process's argv in /proc/PID/cmdline. Exit code 2 for bad
arguments or config, checked before anything starts (reward name, a GPU for --device cuda).
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from tritonforge.commands._config_args import add_config_args, load_from_args
from tritonforge.config import ConfigError
from tritonforge.config.eval import PRESETS, EvalSettings
from tritonforge.config.server import TOKEN_ENV, ServerConfig

ARGV_TOKEN = (
    "a token on the command line is readable by every local user (/proc/PID/cmdline); pass it "
    f"in the environment ({TOKEN_ENV}), with --token-file, or in the --config file"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve-eval",
        help="run the evaluation server (HTTP)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 18188)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where kernels run")
    p.add_argument("--gpus", help="comma-separated CUDA device indices (default: all visible)")
    p.add_argument("--workers", type=int, metavar="N", help="concurrent evaluations per device")
    p.add_argument("--queue-size", type=int, metavar="N", help="waiting requests before 429")
    p.add_argument("--token", help="refused (argv is world-readable): see --token-file")
    p.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"file holding the bearer token (or env {TOKEN_ENV}); required off loopback",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="default rules for requests: strict (ours), kernelbench, tritonforge; a request may "
        "name its own (docs/presets.md)",
    )
    add_config_args(p, ServerConfig, example="eval.correctness_trials=3")
    p.set_defaults(func=run, config_fn=config_from_args)


def _token_from_file(path: str) -> str:
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"--token-file {path}: the file is empty")
    return token


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    if getattr(args, "token", None) is not None or any(
        str(kv).split("=", 1)[0].strip() == "token" for kv in getattr(args, "set", None) or []
    ):
        raise ConfigError(ARGV_TOKEN)
    cfg = load_from_args(args, ServerConfig)
    name = getattr(args, "preset", None) or cfg.eval.preset
    if name != "strict" or cfg.eval.preset != name:  # preset first, then file and --set
        base = ServerConfig(eval=EvalSettings.from_preset(name))
        cfg = load_from_args(args, ServerConfig, base, extra=[f'eval.preset="{name}"'])
    flags = [(f, f) for f in ("host", "port", "device", "workers")]
    for flag, field in [*flags, ("queue_size", "queue_size")]:
        value = getattr(args, flag, None)
        if value is not None:
            try:
                setattr(cfg, field, value)
            except ValidationError as exc:
                msg = exc.errors()[0]["msg"]
                raise ConfigError(f"--{flag.replace('_', '-')} {value!r}: {msg}") from None
    if getattr(args, "token_file", None):
        cfg.token = _token_from_file(args.token_file)
    if args.gpus:
        try:
            cfg.gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--gpus {args.gpus!r}: expected indices like 0,1,2") from None
    cfg.check_safe()
    return cfg


def run(args: argparse.Namespace) -> int:
    from tritonforge.plan.checks import check_eval_settings, check_gpu

    cfg = config_from_args(args)
    check_eval_settings("eval", cfg.eval)
    if cfg.device == "cuda":
        check_gpu("device", "device 'cuda'")
    from tritonforge.evaluation.service.server import serve

    return serve(cfg, log_level=getattr(args, "log_level", "info"))
