"""`longhaul serve`: the web console on the controller (docs/console.md).

    longhaul serve [--store DIR] [--config CONFIG] [--plans DIR] [--start-logs DIR] [--listen HOST:PORT]
                   [--allowed-host NAME]... [--proxied] [--users FILE] [--tls-cert PEM --tls-key PEM]
    longhaul serve --hash-password < password      (a line for the users file)

It listens on loopback unless told otherwise, and answers only the host names it was started for
(its listen address, localhost, each --allowed-host). A users file is needed to listen anywhere
but loopback, behind a proxy (--proxied), or to answer any name that is not a loopback one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from longhaul.core.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:8086"


def register(sub) -> None:
    serve = sub.add_parser("serve", help="the web console: runs, live runs, comparisons (docs/console.md)")
    serve.add_argument("--store", type=Path, help="the run store (default: config.toml's [store] dir)")
    serve.add_argument("--config", type=Path, default=Path("config.toml"),
                       help="the lab's config: --store's default, what the lab page checks, the profiles runs start from")
    serve.add_argument("--plans", type=Path, help="the facility plans' folder (default: plans beside the config)")
    serve.add_argument("--start-logs", type=Path, help="keep the output of runs started from the console here "
                                                       "(default: a temporary folder, removed when the console ends)")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                       help=f"address to listen on (default {DEFAULT_LISTEN}; another than loopback needs --users)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="a further host name browsers use to reach the console (a proxy's name, the "
                            "controller's); repeat for each. Only these, localhost and the listen address are answered")
    serve.add_argument("--proxied", action="store_true",
                       help="the console is reached through a reverse proxy (needs --users and the proxy's --allowed-host)")
    serve.add_argument("--users", type=Path, help="users file: who may log in, as viewer or operator")
    serve.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate (PEM) ...")
    serve.add_argument("--tls-key", type=Path, help="... and its key")
    serve.add_argument("--hash-password", action="store_true", help="read a password on stdin, print its hash")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    from longhaul.appliance.console.auth import hash_password

    if args.hash_password:
        print(hash_password(sys.stdin.readline().rstrip("\n")))
        return 0
    host, port, settings = check(args)
    import uvicorn

    from longhaul.appliance.console.app import create_app

    print(f"longhaul console: {'https' if args.tls_cert else 'http'}://{host}:{port}/ (store {settings.store})",
          file=sys.stderr)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", access_log=False,
                ssl_certfile=str(args.tls_cert) if args.tls_cert else None,
                ssl_keyfile=str(args.tls_key) if args.tls_key else None)
    return 0


def check(args):
    """(host, port, ConsoleSettings) or a ConfigError (exit 2) before anything listens."""
    from longhaul.appliance.config.load import load_config
    from longhaul.appliance.console.app import ConsoleSettings
    from longhaul.appliance.console.auth import Users, UsersError
    from longhaul.appliance.console.hosts import WILDCARDS, AllowedHosts, is_loopback, normal_name, split_host

    host, _, port_text = args.listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError.option("--listen", args.listen, "HOST:PORT, e.g. 127.0.0.1:8086")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError.option("--tls-cert", str(args.tls_cert or args.tls_key), "both --tls-cert and --tls-key")
    for name in args.allowed_host:
        parsed = split_host(name)
        if parsed is None or parsed.port is not None:
            raise ConfigError.option("--allowed-host", name, "a host name or address, without a port or scheme")
    users = None
    if args.users:
        try:
            users = Users.load(args.users)
        except UsersError as e:
            raise ConfigError(args.users, None, ("--users",), str(args.users), str(e)) from None
    elif not is_loopback(host):
        raise ConfigError.option("--listen", args.listen,
                          "a loopback address (127.0.0.1, ::1, localhost), or give --users: another address "
                          "needs authentication")
    elif args.proxied:
        raise ConfigError.option("--proxied", None, "--users as well: behind a proxy, everyone the proxy lets "
                                 "through would otherwise be an operator")
    elif foreign := [n for n in args.allowed_host if not is_loopback(n)]:
        raise ConfigError.option("--allowed-host", foreign[0],
                                 "a loopback name, or give --users: a browser that reaches the console by another "
                                 "name comes through a proxy or another machine")
    if normal_name(host) in WILDCARDS and not args.allowed_host:
        raise ConfigError.option("--listen", args.listen, "a wildcard address with --allowed-host NAME for each "
                                 "name browsers use to reach the console (only those are answered)")
    if args.proxied and not args.allowed_host:
        raise ConfigError.option("--proxied", None, "--allowed-host NAME too: the Host the proxy forwards")
    hosts = AllowedHosts.of(host, args.allowed_host)
    if args.store is None:                    # the config's, made if no run has written it yet
        store = load_config(args.config).store_dir
        store.mkdir(parents=True, exist_ok=True)
    elif not args.store.is_dir():
        raise ConfigError.option("--store", str(args.store), "an existing run store directory")
    else:
        store = args.store
    config = args.config.resolve() if args.config.is_file() else None
    plans = args.plans or (config.parent / "plans" if config else None)
    if args.plans is not None and not args.plans.is_dir():
        raise ConfigError.option("--plans", str(args.plans), "an existing folder of facility plans")
    return host, int(port_text), ConsoleSettings(Path(store).resolve(), users, config, args.start_logs,
                                                 plans.resolve() if plans else None, hosts)

