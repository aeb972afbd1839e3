"""`edgellm fleet config`: LiteLLM proxy config and Prometheus scrape config for several gateways."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgellm.client.fleet import ROUTING, FleetOptions, litellm_config, parse_target, prometheus_config
from edgellm.common.argtypes import positive_int
from edgellm.common.errors import InvalidArgument

PROMETHEUS_FILE = "prometheus.yml"  # written beside the LiteLLM config
_DEFAULTS = FleetOptions()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `fleet` subcommand."""
    p = sub.add_parser("fleet", help="many phones behind one endpoint: LiteLLM proxy and Prometheus configs")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    c = verbs.add_parser(
        "config",
        help=f"write a LiteLLM proxy config (-o FILE) and {PROMETHEUS_FILE} beside it (docs/fleet.md)",
    )
    c.add_argument(
        "--target", action="append", required=True, metavar="[DEVICE=]HOST:PORT",
        help="a gateway (repeat per phone); DEVICE is its `device` label (default HOST-PORT)",
    )  # fmt: skip
    c.add_argument("--model", default=_DEFAULTS.model, help="the model every phone serves (its gateway's id)")
    c.add_argument(
        "--key-env", default=_DEFAULTS.key_env,
        help="environment variable the proxy reads the gateways' API key from",
    )  # fmt: skip
    c.add_argument(
        "--master-key-env", default=_DEFAULTS.master_key_env,
        help="environment variable holding the proxy's own key, which its clients send (sk-...)",
    )  # fmt: skip
    c.add_argument("--https", action="store_true", help="the gateways serve HTTPS (--tls-*)")
    c.add_argument("--routing", choices=ROUTING, default=_DEFAULTS.routing, help="LiteLLM routing strategy")
    c.add_argument(
        "--num-retries", type=positive_int, default=_DEFAULTS.num_retries,
        help="retries of a failed request, each on another healthy phone",
    )  # fmt: skip
    c.add_argument(
        "--cooldown", type=positive_int, default=_DEFAULTS.cooldown_s,
        help="seconds a failed phone is skipped when its answer carried no Retry-After",
    )  # fmt: skip
    c.add_argument("-o", "--output", type=Path, required=True, help="the LiteLLM config file to write")
    c.add_argument("--force", action="store_true", help="overwrite existing files")
    c.set_defaults(handler=run_config)


def run_config(ns: argparse.Namespace) -> int:
    """Write both files; exit 2 on a bad target or an existing file."""
    out: Path = ns.output
    prom = out.parent / PROMETHEUS_FILE
    try:
        targets = [parse_target(t) for t in ns.target]
        options = FleetOptions(
            model=ns.model, key_env=ns.key_env, master_key_env=ns.master_key_env, https=ns.https,
            routing=ns.routing, num_retries=ns.num_retries, cooldown_s=ns.cooldown,
        )  # fmt: skip
        files = {out: litellm_config(targets, options), prom: prometheus_config(targets, options)}
        existing = [str(p) for p in files if p.exists()]
        if existing and not ns.force:
            raise InvalidArgument(f"will not overwrite {', '.join(existing)}: give --force")
    except InvalidArgument as err:
        sys.stderr.write(f"edgellm: fleet config: {err}\n")
        return 2
    for path, data in files.items():
        # JSON is YAML: LiteLLM and Prometheus read it as YAML, and the client needs no YAML library.
        path.write_text(json.dumps(data, indent=2) + "\n")
    sys.stdout.write(
        f"wrote {out} ({len(targets)} gateways, model {options.model}) and {prom}\n"
        f"  proxy:      {options.key_env}=<the gateways' key> {options.master_key_env}=sk-<a key for "
        f"its clients> litellm --config {out}\n"
        f"  prometheus: put the key in {prom.parent / options.key_file} (mode 600), "
        f"then prometheus --config.file={prom}\n"
    )
    return 0
