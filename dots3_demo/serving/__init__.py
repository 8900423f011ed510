"""Serving the studio, apart from its UI: health probes and engine start with the server
(``health``), closed tabs' sessions dropped (``sessions``), glibc's allocator tuned for a
long-running server (``memory``)."""
