"""The TLS a Temporal client uses, from the settings (``MARATHON_TEMPORAL_TLS_*``): ``False``
(plain TCP, one machine or a private network) when none is set, else a
``temporalio.service.TLSConfig`` with the files' PEM bytes: the CA that verifies the frontend's
certificate and, for mTLS, this node's client certificate and key."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from marathon.settings import Settings

class TemporalTLSError(ValueError):
    """The TLS settings are incomplete or name a file that cannot be read; says which."""

def _read(setting: str, path: Optional[Path]) -> Optional[bytes]:
    if path is None:
        return None
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as error:
        raise TemporalTLSError(f"MARATHON_{setting.upper()}={path}: cannot read it ({error.strerror})") from None
    if b"-----BEGIN" not in data:
        raise TemporalTLSError(f"MARATHON_{setting.upper()}={path}: not a PEM file (no -----BEGIN line)")
    return data

def temporal_tls(settings: Settings):
    """``False`` or the ``TLSConfig`` for ``Client.connect(..., tls=...)``."""
    fields = ("temporal_tls_cert", "temporal_tls_key", "temporal_tls_ca", "temporal_tls_server_name")
    if not any(getattr(settings, name) for name in fields):
        return False
    if (settings.temporal_tls_cert is None) != (settings.temporal_tls_key is None):
        raise TemporalTLSError(
            "MARATHON_TEMPORAL_TLS_CERT and MARATHON_TEMPORAL_TLS_KEY go together (mTLS needs both), got "
            f"cert={settings.temporal_tls_cert}, key={'set' if settings.temporal_tls_key else None}"
        )
    from temporalio.service import TLSConfig

    return TLSConfig(
        server_root_ca_cert=_read("temporal_tls_ca", settings.temporal_tls_ca),
        client_cert=_read("temporal_tls_cert", settings.temporal_tls_cert),
        client_private_key=_read("temporal_tls_key", settings.temporal_tls_key),
        domain=settings.temporal_tls_server_name or None,  # compose passes an unset one as ""
    )
