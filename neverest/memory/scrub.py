"""Scrubbing: what identifies a machine, a person or a client is taken out of a lesson's text.

A lesson's sentence may one day leave the machine, and every sentence is shown to agents, so what
could tell a reader whose machine, whose account or whose client it came from is replaced by a
plain word that keeps the sentence readable.  ``scrub`` removes, wherever it stands (start of the
text, after a quote, inside brackets, after ``=`` or ``:``, inside ``file://``...):

- paths: every absolute POSIX path, ``~/...`` and ``~user/...``, ``./...`` and ``../...``,
  ``$VAR/...``, Windows paths (``C:\\Users\\ann\\x``, ``C:/x``, ``\\\\server\\share``, ``.\\x``,
  ``%VAR%\\x``), a quoted path even with spaces in it, and relative paths that show where a project
  lies: three parts or more (``src/app/page``), a file part (``app/page.tsx``) or a bracket part
  (``app/(protected)``, a route group).  The words stand for the path: "a path".  A relative path
  of two plain parts is kept (``TCP/IP``, ``linux/amd64``, ``application/json``,
  ``actions/checkout@v4``, ``@types/node``), and so is a bare file name (``package.json``,
  ``next.config.mjs``, ``.env``): it identifies nothing and lessons need it.  Route groups are not
  kept: a lesson that needs them says "paths holding a bracket" in words.  A few system paths that
  identify nothing are kept as they are (``/tmp``, ``/dev/null``, ``/usr/bin/env``: ``_SYSTEM_PATHS``).
- URLs, all of them ("a URL"), credentials or not, ``git@host:owner/repo`` remotes and ``www.`` links;
- e-mail addresses ("an address");
- tokens and secrets ("a token"): known key shapes (``sk-...``, ``ghp_...``, ``github_pat_...``,
  ``xoxb-...``, ``AKIA...``, ``AIza...``, ``glpat-...``, ``npm_...``, ``hf_...``, JWTs, PEM private
  keys), the value after ``password=``, ``token:``, ``Bearer``..., and long runs of letters and
  digits that read as random (the mixture of cases and digits, not the length, decides: an
  identifier such as ``Utf8JsonReaderOptions2`` is kept);
- the value of an upper-case variable assignment (``LANG=de_DE.UTF-8`` -> ``LANG``);
- ids ("an id"): UUIDs, hex runs of 12 characters or more (git hashes, container ids, addresses
  such as ``0x7ffd5f3e2a10``), MAC addresses;
- IP addresses ("a host"), v4 and v6, but loopback and ``0.0.0.0``;
- host names ("a host"): names under private suffixes (``ann-macbook.local``, ``.lan``,
  ``.internal``, ``.corp``, ``.home.arpa``...), lower-case domains under a public suffix that are not
  well-known public services (``build01.acme-corp.com`` goes, ``registry.npmjs.org`` and
  ``api.github.com`` stay), machine names (``Anns-MacBook-Pro``, ``DESKTOP-4F2K9QZ``) and this
  machine's own host name;
- user names ("a user"): this account's (``getpass.getuser()``) and its home folder's name, and the
  names seen in the text's own paths (``/home/ann/``, ``/Users/ann/``, ``C:\\Users\\ann\\``,
  ``~ann/``): a later bare "ann" goes too.  Generic accounts (``root``, ``runner``, ``ubuntu``...)
  and names that are common English words ("will", "mark") are left where they stand as words.

What is kept: program names, error classes (``ModuleNotFoundError``), flags
(``--no-build-isolation``), versions (``3.11``, ``v20.1.0``), numbers, bare file names.

The other functions use the same rules:

- ``meaningful``: whether the scrubbed text still says something (three distinct content words or
  more, numbers included; placeholders, stop words and the lesson templates' own words such as
  "error", "recurs", "fails" not counted).  A lesson that says nothing once scrubbed stays personal:
  it is never published.
- ``scrub_check``: why a text holds what must never cross between memories, or None.  It is the
  receivers' gate on text that cannot be changed (a received lesson's hash is signed over its
  text), so it is conservative, to refuse no lesson that is fine: paths in homes and under the
  roots where people keep work (``/home``, ``/Users``, ``/root``, ``/mnt``, ``/srv``...), ``~/`` and
  Windows paths, e-mail addresses (and ``user@host:repo`` remotes), URLs with credentials, tokens of
  known shapes and private IP addresses.  Relative paths, ``/usr/...``, HTTP routes, plain URLs,
  host names and hashes pass it.  Whatever it finds, ``scrub`` removes.
- ``withheld``: why this memory does not publish a text of its own: ``scrub_check``'s reason, or
  anything ``scrub`` would still remove, or nothing meaningful left.
- ``shown``: the text as an agent is shown it (``scrub``): stored lessons are already scrubbed when
  they are phrased, and a received lesson whose signed text cannot change is scrubbed on the way out.

It runs on every lesson shown to an agent, so each rule is a regular expression tried only when a
string it needs is in the text and compiled only when first tried (``benchmarks/bench_scrub.py``
measures it).  It imports nothing but the standard library (the hook imports it on every call).

Known limits: a path with spaces is found only when quoted; ``user@host`` without a dot in the host
is kept; a four-part version (``1.2.3.4``) is taken for an IP address; Emacs ``.org`` files are
taken for host names; a bare user name is found only when it is this account's or appears in a
path of the same text; a lower-case passphrase after ``password:`` is kept; HTTP routes
(``/api/users``) are absolute paths to it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["local_names", "meaningful", "scrub", "scrub_check", "shown", "withheld"]

PATH: Final = "a path"
URL: Final = "a URL"
ADDRESS: Final = "an address"
TOKEN: Final = "a token"
ID: Final = "an id"
HOST: Final = "a host"
USER: Final = "a user"
PLACEHOLDERS: Final = (PATH, URL, ADDRESS, TOKEN, ID, HOST, USER)

# -- what is kept ------------------------------------------------------------------------------

# Absolute paths that identify nothing and that lessons need as they are.
_SYSTEM_PATHS: Final = frozenset({
    "/tmp", "/var/tmp", "/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/shm", "/dev/tty",
    "/dev/random", "/dev/urandom", "/etc/hosts", "/etc/resolv.conf", "/etc/passwd", "/etc/os-release",
    "/bin/sh", "/bin/bash", "/usr/bin/env", "/usr/bin", "/usr/local", "/usr/local/bin", "/usr/lib", "/bin",
    "/proc", "/sys", "/var/run/docker.sock", "/run/docker.sock",
})
# Account names that identify nobody (service, CI and container accounts, folder names under /Users).
_GENERIC_USERS: Final = frozenset({
    "root", "runner", "ubuntu", "debian", "fedora", "centos", "admin", "administrator", "user", "users", "guest",
    "test", "tester", "dev", "developer", "vagrant", "jenkins", "circleci", "travis", "docker", "www-data",
    "nobody", "daemon", "git", "build", "builder", "ci", "postgres", "mysql", "node", "python", "app", "vscode",
    "codespace", "codespaces", "gitpod", "coder", "ec2-user", "shared", "public", "default", "sandbox", "work",
    "workspace", "home", "localhost", "localadmin", "buildkitsandbox", "raspberrypi", "me",
    # host names that name no one's machine
    "vm", "server", "box", "machine", "laptop", "desktop", "pc", "workstation", "devbox", "container", "linux",
    "mac", "macbook", "local",
    # the placeholders' own words: removing them would loop
    "a", "an", "path", "url", "address", "token", "id", "host",
})
# First names that are also common English words: as a bare word they are left (as a word they say
# nothing about anyone, and removing "will" from every sentence would wreck it).
_COMMON_WORDS: Final = frozenset(
    "will mark max bill grant rob pat sue may june april ray frank art rose amber dawn chase hunter dash jack "
    "rust page case cook young bell hope faith joy guy gene earl carol holly ivy iris jade lily penny ruby sky "
    "summer autumn victor vince drew dale glen cliff rocky sandy rusty woody buck colt ace bob don".split())
# Public services whose names lessons need ("api.github.com rate-limits"); a domain under one is kept.
_PUBLIC_DOMAINS: Final = frozenset({
    "github.com", "githubusercontent.com", "github.io", "githubassets.com", "gitlab.com", "bitbucket.org",
    "npmjs.org", "npmjs.com", "yarnpkg.com", "pypi.org", "pythonhosted.org", "python.org", "docker.io",
    "docker.com", "ghcr.io", "quay.io", "gcr.io", "amazonaws.com", "aws.amazon.com", "googleapis.com",
    "google.com", "gstatic.com", "microsoft.com", "azure.com", "windows.net", "cloudflare.com", "vercel.com",
    "vercel.app", "netlify.com", "netlify.app", "heroku.com", "herokuapp.com", "debian.org", "ubuntu.com",
    "archlinux.org", "fedoraproject.org", "apple.com", "crates.io", "rust-lang.org", "golang.org", "go.dev",
    "nodejs.org", "rubygems.org", "maven.org", "apache.org", "gradle.org", "jetbrains.com", "readthedocs.io",
    "readthedocs.org", "stackoverflow.com", "openai.com", "anthropic.com", "huggingface.co", "sentry.io",
    "slack.com", "kernel.org", "mozilla.org", "jsdelivr.net", "unpkg.com", "cloudfront.net", "conda.io",
    "anaconda.org", "anaconda.com", "postgresql.org", "mysql.com", "sqlite.org", "nginx.org", "kubernetes.io",
    "k8s.io", "helm.sh", "terraform.io", "hashicorp.com", "letsencrypt.org", "mcr.microsoft.com",
    "visualstudio.com", "expo.dev", "nextjs.org", "react.dev", "reactjs.org", "svelte.dev", "vuejs.org",
    "deno.land", "bun.sh", "example.com", "example.org", "example.net",
})
# Suffixes of names that only a private network resolves: always a machine of someone's.
_PRIVATE_SUFFIXES: Final = frozenset({
    "local", "lan", "internal", "intranet", "corp", "home", "localdomain", "private", "priv", "arpa", "intra",
})
# Suffixes of public domains, those that are not also common file extensions (.py, .sh, .md, .rs, .pl,
# .so, .in, .ai, .app and .info are left: config.h.in, logo.ai and Xcode.app are files).
_PUBLIC_SUFFIXES: Final = frozenset({
    "com", "net", "org", "io", "dev", "co", "cloud", "tech", "biz", "me", "us", "uk", "de", "fr", "nl", "eu",
    "ca", "au", "ch", "se", "jp", "cn", "ru", "xyz", "site", "online", "es", "it", "pt", "be", "at", "dk", "fi",
    "no", "pl", "cz", "br", "nz", "ie", "il", "kr", "tw", "hk", "sg", "za", "mx", "ar", "gov", "edu", "mil",
    "int", "team", "works", "systems", "services", "solutions", "digital", "network", "group", "company",
})
# Dotted names that are code, not hosts, though they end in a private suffix.
_CODE_NAMES: Final = frozenset({"threading.local", "werkzeug.local", "contextvars.local"})

class _Lazy:
    """A regular expression compiled when first used: compiling all of them costs about 20 ms, more than
    the hook can spare on every call, and most texts need only the few whose guards they pass."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source, self._flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    def sub(self, replacement: str | Callable[[re.Match[str]], str], text: str) -> str:
        return self.compiled.sub(replacement, text)

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text)

    def findall(self, text: str) -> list[str]:
        return self.compiled.findall(text)


# -- the patterns -----------------------------------------------------------------------------

# Where a path may start: not inside a word, a path, a URL or a version.
_B: Final = r"(?<![\w/\\.~$@%+&)\]}-])"
# One part of a POSIX path: word characters and the few others file names hold; a bracketed group
# (route groups, dynamic segments) is part of it when it closes within the part.
_SEG: Final = r"(?:[\w.@+~%-]|\([^()\s/\\\"'`]*\)|\[[^\[\]\s/\\\"'`]*\]|\{[^{}\s/\\\"'`]*\})+"
_WSEG: Final = r"(?:[\w.@+~%$-]|\([^()\s\\/\"'`]*\))+"
_SEP: Final = r"(?:\\{1,2}|/)"
_LINE: Final = r"(?::\d+)*"  # path:line:column

_URL_RE: Final = _Lazy(r"(?<![\w.+-])[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'`<>]*|(?<![\w.@/-])www\.[^\s\"'`<>]+")
_URL_CREDENTIALS: Final = _Lazy(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@\"'`<>]+:[^\s/@\"'`<>]*@")
_REMOTE: Final = _Lazy(r"(?<![\w.-])[\w.-]+@[\w-]+(?:\.[\w-]+)+:(?!//)[\w.~/-]+")
_EMAIL: Final = _Lazy(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_PEM: Final = _Lazy(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)
_TOKEN_SHAPES: Final = _Lazy(
    r"(?<![\w-])(?:"
    r"sk-(?=[\w-]*\d)[\w-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9-]{8,}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
    r"|AIza[\w-]{30,}"
    r"|[sprk]k_(?:live|test)_[A-Za-z0-9]{10,}"
    r"|npm_[A-Za-z0-9]{30,}|pypi-[\w-]{40,}|hf_[A-Za-z0-9]{30,}"
    r"|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"
    r")")
_BEARER: Final = _Lazy(r"\b([Bb]earer|[Bb]asic)(\s+)(?=\S*(?:\d|[a-z]\S*[A-Z]))[A-Za-z0-9._~+/=-]{12,}")
_SECRET_VALUE: Final = _Lazy(
    r"\b((?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|auth|"
    r"credentials?|private[_-]?key|client[_-]?secret)[\"']?\s*[=:]\s*)([\"']?)"
    r"(?=[^\s\"',;]*[^a-z\s\"',;])([^\s\"',;]{6,})\2", re.I)
_ASSIGN: Final = _Lazy(r"\b([A-Z][A-Z0-9_]+)=(?:\"[^\"]*\"|'[^']*'|[^\s\"'`)\]},;]+)")

_QUOTED_PATH: Final = _Lazy(r"([\"'`])((?:/|~|\.{1,2}[/\\]|[A-Za-z]:[\\/]|\\\\|\$\{?\w+\}?/)[^\"'`\n]*?)\1")
_WINDOWS: Final = _Lazy(
    rf"(?<![\w\\/])(?:[A-Za-z]:{_SEP}(?:{_WSEG}(?:{_SEP}{_WSEG})*{_SEP}?)?"  # C:\Users\ann, C:/x
    rf"|\\\\{_WSEG}(?:{_SEP}{_WSEG})*{_SEP}?"  # \\server\share
    rf"|%\w+%{_SEP}(?:{_WSEG}(?:{_SEP}{_WSEG})*)?"  # %USERPROFILE%\x
    rf"|\.{{1,2}}\\{{1,2}}(?:{_WSEG}(?:{_SEP}{_WSEG})*)?)"  # .\x, ..\x
    + _LINE)
_WINDOWS_RELATIVE: Final = _Lazy(rf"{_B}{_WSEG}(?:\\{{1,2}}{_WSEG})+")
_POSIX: Final = _Lazy(
    rf"(?:{_B}|(?<=-[A-Za-z]))(?:"
    rf"/{_SEG}(?:/{_SEG})*/?"  # /home/ann/x
    rf"|~[\w.-]*/(?:{_SEG}(?:/{_SEG})*/?)?"  # ~/x, ~ann/x
    rf"|\.{{1,2}}/(?:{_SEG}(?:/{_SEG})*/?)?"  # ./x, ../x
    rf"|\$\{{?\w+\}}?/(?:{_SEG}(?:/{_SEG})*/?)?"  # $HOME/x
    rf"){_LINE}")
_RELATIVE: Final = _Lazy(rf"{_B}{_SEG}(?:/{_SEG})+/?{_LINE}")
_FILE_PART: Final = _Lazy(r"(?:^|[\w-])\.[A-Za-z][A-Za-z0-9]{0,7}$|^\.[\w-]+$")
_NUMERIC_PART: Final = _Lazy(r"[\d.]+")
_ACRONYM_PART: Final = _Lazy(r"[A-Z0-9]{1,5}")
_BRACKETS: Final = frozenset("()[]{}")

_UUID: Final = _Lazy(r"(?<![A-Za-z0-9])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                          r"(?![A-Za-z0-9])")
_MAC: Final = _Lazy(r"(?<![\w:-])[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(?:\1[0-9a-fA-F]{2}){4}(?![\w:-])")
_IPV4: Final = _Lazy(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")
_IPV6: Final = _Lazy(r"(?<![\w:.])[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?![\w:])")
_HEX: Final = _Lazy(r"(?<![A-Za-z0-9])(?:0x)?[0-9a-fA-F]{12,}(?![A-Za-z0-9])")
_RUN: Final = _Lazy(r"(?<![\w+/=-])[\w+/=-]{20,}")
_CLASS_RUN: Final = _Lazy(r"[A-Z]+|[a-z]+|[0-9]+")

_HOSTNAME: Final = _Lazy(
    r"(?<![\w.@/\\-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+([a-z]{2,63}))(?![\w-]|\.[a-z0-9])")
_MACHINE: Final = _Lazy(r"(?<![\w.-])(?:[A-Za-z][\w']*-(?:[\w-]*-)?(?:MacBook|Macbook|macbook|MBP|mbp|iMac|imac|"
                             r"ThinkPad|Thinkpad|thinkpad)[\w-]*"
                             r"|(?:DESKTOP|LAPTOP|WIN)-[A-Z0-9]{6,})(?![\w-])")

_USERS_IN_PATHS: Final = _Lazy(
    r"(?:/home|/Users|/var/home|/export/home|/usr/home)/([^/\\\s\"'`:]+)"
    r"|[A-Za-z]:(?:\\{1,2}|/)(?:Users|Documents and Settings)(?:\\{1,2}|/)([^/\\\s\"'`:]+)"
    r"|(?<![\w/])~([A-Za-z_][\w.-]*)/")

_PRIVATE_V4: Final = ((10,), (172, range(16, 32)), (192, 168), (100, range(64, 128)), (169, 254))
# Absolute paths the receivers' gate refuses: under these first parts, or with a home in their first three.
_CHECK_ROOTS: Final = frozenset({
    "home", "Users", "root", "Volumes", "mnt", "media", "srv", "workspace", "workspaces", "builds", "scratch",
    "export", "afs", "gpfs", "net",
})
_HOMES: Final = frozenset({"home", "Users"})


# -- this machine's names ---------------------------------------------------------------------


@functools.cache
def local_names() -> tuple[frozenset[str], frozenset[str]]:
    """(user names, host names) of this machine that are removed wherever they stand as words: the
    account's name and its home folder's, the host's name and its first label.  Generic names and
    common English words are left out.  Cached for the process (tests clear it with ``cache_clear``)."""
    import getpass  # only when a text is scrubbed: the hook imports this module on every call

    users: set[str] = set()
    try:
        users.add(getpass.getuser())
    except (OSError, KeyError, ImportError):  # no name in the environment and none in the password database
        pass
    users.add(os.path.basename(os.path.expanduser("~").rstrip("/\\")))
    hosts: set[str] = set()
    uname = getattr(os, "uname", None)
    node = uname().nodename if uname is not None else os.environ.get("COMPUTERNAME", "")
    if node:
        hosts.update({node, node.split(".")[0]})
    return _usable(users), frozenset(h for h in _usable(hosts) if len(h) >= 3)


def _usable(names: set[str]) -> frozenset[str]:
    return frozenset(n for n in names if len(n) >= 2 and n.lower() not in _GENERIC_USERS
                     and n.lower() not in _COMMON_WORDS and not n.isdigit())


@functools.lru_cache(maxsize=256)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])", re.I)


# -- the rules --------------------------------------------------------------------------------


def _trailing(found: str, placeholder: str) -> str:
    """The placeholder for ``found``, with the sentence's own closing punctuation given back."""
    kept = found.rstrip(".,:;!?")
    tail = found[len(kept):]
    while kept and kept[-1] in ")]}" and kept.count(kept[-1]) > kept.count({")": "(", "]": "[", "}": "{"}[kept[-1]]):
        tail = kept[-1] + tail
        kept = kept[:-1]
    return placeholder + tail


def _url(m: re.Match[str]) -> str:
    return _trailing(m.group(0), URL)


def _system_path(path: str) -> bool:
    return path.rstrip("/") in _SYSTEM_PATHS or path in _SYSTEM_PATHS


def _posix(m: re.Match[str]) -> str:
    found = m.group(0)
    kept = found.rstrip(".,:;!?")
    if _system_path(kept):
        return found
    return _trailing(found, PATH)


def _quoted(m: re.Match[str]) -> str:
    inner = m.group(2)
    if _system_path(inner) or not re.search(r"\w", inner):
        return m.group(0)
    return f"{m.group(1)}{PATH}{m.group(1)}"


def _is_relative_path(text: str) -> bool:
    parts = [p for p in text.split("/") if p]
    if len(parts) < 2:
        return False
    if all(_NUMERIC_PART.fullmatch(p) for p in parts) or all(_ACRONYM_PART.fullmatch(p) for p in parts):
        return False  # 2024/01/02, 1/2, CI/CD/QA
    if parts[0].startswith("@") and len(parts) == 2:
        return False  # @types/node
    if len(parts) >= 3 or any(c in _BRACKETS for c in text):
        return True
    return bool(_FILE_PART.search(parts[-1].split(":")[0]))


def _relative(m: re.Match[str]) -> str:
    found = m.group(0)
    kept = found.rstrip(".,:;!?")
    return _trailing(found, PATH) if _is_relative_path(kept.rstrip(")]}")) else found


def _windows_relative(m: re.Match[str]) -> str:
    parts = re.split(r"\\{1,2}", m.group(0).rstrip(".,:;!?"))
    if len(parts) >= 3 or _FILE_PART.search(parts[-1]):
        return _trailing(m.group(0), PATH)
    return m.group(0)


def _octets(m: re.Match[str]) -> tuple[int, ...] | None:
    octets = tuple(int(g) for g in m.groups())
    return octets if all(o <= 255 for o in octets) else None


def _ipv4(m: re.Match[str]) -> str:
    octets = _octets(m)
    if octets is None or octets[0] in (0, 127, 255):
        return m.group(0)
    return HOST


def _is_ipv6(text: str) -> bool:
    groups = text.split(":")
    if any(len(g) > 4 for g in groups) or sum(len(g) for g in groups) < 4:
        return False
    if "::" in text:
        return text.count("::") == 1 and len([g for g in groups if g]) <= 7
    return len(groups) == 8 and all(groups)


def _ipv6(m: re.Match[str]) -> str:
    text = m.group(0)
    return HOST if _is_ipv6(text) and text not in ("::1", "::") else text


def _random_run(text: str) -> bool:
    """Whether a run of letters and digits reads as a key rather than a word or an identifier."""
    for chunk in re.split(r"[_+/=-]+", text):
        if len(chunk) < 16:
            continue
        digits = sum(c.isdigit() for c in chunk)
        if not digits or digits == len(chunk):
            continue
        if len(chunk) >= 40:
            return True
        runs = len(_CLASS_RUN.findall(chunk))
        if len(chunk) >= 20 and runs / len(chunk) >= 0.5:
            return True
        if len(chunk) >= 20 and chunk.lower() == chunk and digits / len(chunk) >= 0.25:
            return True
    return False


def _run(m: re.Match[str]) -> str:
    return TOKEN if _random_run(m.group(0)) else m.group(0)


def _host(m: re.Match[str]) -> str:
    name, suffix = m.group(1), m.group(2)
    if name in _CODE_NAMES:
        return name
    if suffix in _PRIVATE_SUFFIXES:
        return HOST
    if suffix in _PUBLIC_SUFFIXES and not any(name == d or name.endswith("." + d) for d in _PUBLIC_DOMAINS):
        return HOST
    return name


def _secret_value(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(2)}{TOKEN}{m.group(2)}"


def _users_in_paths(text: str) -> set[str]:
    found: set[str] = set()
    for m in _USERS_IN_PATHS.finditer(text):
        found.add(next(g for g in m.groups() if g))
    return found


# (guards, shortest, pattern, replacement): the pattern is tried only when one of the guards is in the
# lower-cased text (no guards: always) and a whitespace-separated word is at least ``shortest`` long.
# The order matters: assignments before URLs and paths (their value goes whole), URLs before e-mail
# addresses and paths, quoted paths before the others, paths before host names (a path's parts look
# like hosts), ids before random runs.
_Replacement = str | Callable[[re.Match[str]], str]
_RULES: Final[tuple[tuple[tuple[str, ...], int, _Lazy, _Replacement], ...]] = (
    (("-----begin",), 0, _PEM, TOKEN),
    (("=",), 0, _ASSIGN, r"\1"),
    (("pass", "pwd", "secret", "token", "key", "auth", "credential"), 0, _SECRET_VALUE, _secret_value),
    (("bearer", "basic"), 0, _BEARER, rf"\1\2{TOKEN}"),
    (("://", "www."), 0, _URL_RE, _url),
    (("@",), 0, _REMOTE, URL),
    (("@",), 0, _EMAIL, ADDRESS),
    (("sk-", "gh", "glpat-", "xox", "akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "aiza", "_live_",
      "_test_", "npm_", "pypi-", "hf_", "eyj"), 12, _TOKEN_SHAPES, TOKEN),
    (("\"", "'", "`"), 0, _QUOTED_PATH, _quoted),
    (("\\", ":/", "%"), 0, _WINDOWS, _posix),
    (("/",), 0, _POSIX, _posix),
    (("/",), 0, _RELATIVE, _relative),
    (("\\",), 0, _WINDOWS_RELATIVE, _windows_relative),
    (("-",), 36, _UUID, ID),
    ((":", "-"), 17, _MAC, ID),
    ((":",), 3, _IPV6, _ipv6),
    ((".",), 7, _IPV4, _ipv4),
    ((), 12, _HEX, ID),
    ((), 20, _RUN, _run),
    ((".",), 4, _HOSTNAME, _host),
    (("macbook", "mbp", "imac", "thinkpad", "desktop-", "laptop-", "win-"), 0, _MACHINE, HOST),
)


def scrub(text: str) -> str:
    """``text`` with what identifies a machine, a person or a client replaced by plain words (the
    module's docstring lists them).  A text holding none of it comes back unchanged, and scrubbing a
    scrubbed text changes nothing."""
    seen_users = _users_in_paths(text) if ("/" in text or "\\" in text) else set()
    low = text.lower()
    longest = max(map(len, text.split()), default=0)
    for guards, shortest, pattern, replacement in _RULES:
        if longest < shortest:
            continue
        if guards:
            for guard in guards:
                if guard in low:
                    break
            else:
                continue
        text = pattern.sub(replacement, text)
    users, hosts = local_names()
    if hosts:
        text = _names_pattern(hosts).sub(HOST, text)
    if seen_users:
        users = users | _usable(seen_users)
    if users:
        text = _names_pattern(users).sub(USER, text)
    return text


def shown(text: str) -> str:
    """A lesson's text as an agent is shown it: scrubbed.  The one function every render, the hook,
    the MCP server and the agent's memory file pass a lesson's text through."""
    return scrub(text)


# -- the gates --------------------------------------------------------------------------------

_STOP_WORDS: Final = frozenset(
    # function words
    "a an the and or but if then else of to in on at by for with without from into onto as is are was were be "
    "been being it its it's this that these those there here i you he she we they me my your our their them us do "
    "does did done not no yes can could should would will shall may might must have has had so than too very just "
    "also again what which who whom whose when where why how all any some each every more most other such only "
    "own same now up down out over under about after before while because until via per both either neither "
    "nor one once its get got gets "
    # the lesson templates' own words (phrasing.py): they say that something happened, not what
    "person agent agent's corrected correction error errors recurs recur recurring fails fail failed failing "
    "expected unexpectedly happen happened happens repeatedly approach wants want does "
    # the placeholders' words
    "path url address token id host user".split())
_CONTENT: Final = _Lazy(r"[^\W_][\w'+#.-]*")
MIN_CONTENT_WORDS: Final = 3


def meaningful(text: str) -> bool:
    """Whether ``text`` still says something once scrubbed: at least ``MIN_CONTENT_WORDS`` distinct
    words (numbers count: "GNU make 4") that are neither stop words nor the lesson templates' own words
    ("fails", "recurs", "The person corrected the agent") nor placeholders."""
    scrubbed = scrub(text)
    for placeholder in PLACEHOLDERS:
        scrubbed = scrubbed.replace(placeholder, " ")
    words = {w.strip(".-'").lower() for w in _CONTENT.findall(scrubbed)}
    content = {w for w in words if (len(w) >= 2 or w.isdigit()) and w not in _STOP_WORDS}
    return len(content) >= MIN_CONTENT_WORDS


def _private_ipv4(octets: tuple[int, ...]) -> bool:
    for prefix in _PRIVATE_V4:
        if all(octets[i] in p if isinstance(p, range) else octets[i] == p for i, p in enumerate(prefix)):
            return True
    return False


def _checked_path(found: str) -> bool:
    """Whether a path ``_POSIX`` or ``_WINDOWS`` found is one the receivers' gate refuses: under a
    file-system root, in a home, or on Windows."""
    found = found.rstrip(".,:;!?")
    if _system_path(found):
        return False
    if found.startswith("~") or found[:1] not in ("/", ".", "$"):
        return not found.startswith(("%", "."))  # ~, C:\, \\server; not %VAR% nor .\x
    if found.startswith("/"):
        parts = [p for p in found.split("/") if p]
        return len(parts) >= 2 and (parts[0] in _CHECK_ROOTS or not _HOMES.isdisjoint(parts[:3]))
    return False


def scrub_check(text: str) -> str | None:
    """Why ``text`` holds what must never cross between memories, or None.  Conservative (a text it
    refuses is a lesson lost): only paths under file-system roots, in homes or on Windows drives, e-mail
    addresses, URLs with credentials, tokens of known shapes and private IP addresses."""
    if "://" in text and _URL_CREDENTIALS.search(text):
        return "a URL with credentials"
    if _TOKEN_SHAPES.search(text) or ("-----BEGIN" in text and _PEM.search(text)):
        return "a token"
    if "@" in text and (_EMAIL.search(text) or _REMOTE.search(text)):
        return "an e-mail address or a remote"
    if "/" in text or "\\" in text or "~" in text:
        for m in _QUOTED_PATH.finditer(text):
            if _checked_path(m.group(2)):
                return "a path"
        for pattern in (_WINDOWS, _POSIX):
            for m in pattern.finditer(text):
                if _checked_path(m.group(0)):
                    return "a path"
    if "." in text:
        for m in _IPV4.finditer(text):
            octets = _octets(m)
            if octets is not None and _private_ipv4(octets):
                return "a private IP address"
    if ":" in text:
        for m in _IPV6.finditer(text):
            low = m.group(0).lower()
            if _is_ipv6(low) and (low.startswith("fe80:") or low[:2] in ("fc", "fd")):
                return "a private IP address"
    return None


def withheld(text: str) -> str | None:
    """Why this memory does not publish a lesson of its own with this text, or None: it holds what
    receivers refuse (``scrub_check``), or anything ``scrub`` would still remove (a lesson phrased
    before scrubbing was what it is now), or it says nothing once scrubbed (``meaningful``)."""
    reason = scrub_check(text)
    if reason is not None:
        return f"it holds {reason}"
    if scrub(text) != text:
        return "it holds what scrubbing removes"
    if not meaningful(text):
        return "it says nothing once scrubbed"
    return None
