"""User and group names as the system's account databases give them.

Every call may block: NSS may ask LDAP or another network service, so the server calls these
off the event loop.
"""

from __future__ import annotations

import grp
import pwd


def names_of(uid: int, gid: int) -> tuple[str, str]:
    """(user, group) for a process's uid and gid; "" for an id that has no name."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = ""
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = ""
    return user, group


def _found(lookup, name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


def user_exists(name: str) -> bool:
    return _found(pwd.getpwnam, name)


def group_exists(name: str) -> bool:
    return _found(grp.getgrnam, name)
