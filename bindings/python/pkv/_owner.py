"""Owner: what Engine and StoreAdmin share as owners of one pkv handle that close() frees."""


class Owner:
    """Owns self._handle (None once freed) and frees it with close(), which the class defines
    and makes idempotent. A with-block closes it on leaving; so does garbage collection, for an
    owner dropped open."""

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # getattr: __init__ may have failed before _handle was set
        if getattr(self, '_handle', None) is not None:
            try:
                self.close()
            except Exception:  # at interpreter shutdown the modules may be gone
                pass
