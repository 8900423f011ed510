"""No file outside the app's uploads and Gradio's own assets can be fetched through its file routes.

Against a live server (``launch_app(..., prevent_thread_lock=True)``), with raw request paths
(``http.client`` sends them as written: no client-side ``..`` normalisation): ``/etc/passwd``,
``/proc/self/environ``, a secret file in a temporary folder and the repository's own sources,
asked for through every route Gradio 6.31 serves files from (``gradio/routes.py``):
``/gradio_api/file=`` and its deprecated ``/gradio_api/file/``, ``/file=``, ``/static/``,
``/assets/``, ``/svelte/``, ``/gradio_api/custom_component/…``, ``/gradio_api/proxy=``,
``/gradio_api/file=<url>``, plus ``..`` (raw, ``%2e%2e``, ``%252e%252e``, ``..%2f``, backslashes),
``%00``, ``file://`` and symlinks placed inside the upload folder. Every answer must be an error
(400/403/404/405) whose body holds none of the file's content.

Positive controls show each route does serve what it should (an uploaded file, a Gradio asset),
so the refusals are the routes' checks, not a broken route. ``/gradio_api/upload`` must keep a
file name's ``..`` from writing outside the upload folder.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
REFUSED = {400, 403, 404, 405}
PASSWD = Path("/etc/passwd")


@pytest.fixture(scope="module")
def server(profile):
    from dots3_demo.ui import launch_app

    demo = launch_app(profile, None, host="127.0.0.1", port=None, seq=8192, prevent_thread_lock=True, quiet=True)
    try:
        yield demo
    finally:
        demo.close()


@pytest.fixture(scope="module")
def base(server) -> str:
    return server.local_url.rstrip("/")


@pytest.fixture(scope="module")
def upload_dir(server) -> Path:
    return Path(server.server_app.uploaded_file_dir)


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> Path:
    """A file outside every folder the app serves, with unguessable content."""
    path = tmp_path_factory.mktemp("outside") / "secret.txt"
    path.write_text(f"SECRET-{uuid.uuid4().hex}\n")
    return path


@pytest.fixture(scope="module")
def planted(upload_dir, secret):
    """Symlinks inside the upload folder pointing out of it (removed afterwards)."""
    folder = upload_dir / f"hardening-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    links = {
        "passwd": (folder / "passwd.txt", PASSWD),
        "secret": (folder / "secret.png", secret),
        "source": (folder / "app.py", REPO / "app.py"),
        "etc_dir": (folder / "etc", Path("/etc")),
        "outside_dir": (folder / "outside", secret.parent),
    }
    for link, target in links.values():
        link.symlink_to(target)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def request(base: str, raw_path: str, method: str = "GET", body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """Send ``raw_path`` exactly as written (no normalisation, no redirects followed)."""
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, raw_path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _marker(path: Path) -> bytes:
    """A piece of ``path``'s content that no error page would contain."""
    data = path.read_bytes()
    return data[:48] if path != PASSWD else b"root:x:0:0"


def assert_refused(base: str, raw_path: str, *secrets: Path) -> None:
    for method in ("GET", "HEAD"):
        status, body = request(base, raw_path, method)
        assert status in REFUSED, f"{method} {raw_path} → {status}: {body[:200]!r}"
        for path in secrets:
            assert _marker(path) not in body, f"{method} {raw_path} leaked {path}"
    status, _ = request(base, raw_path, headers={"Range": "bytes=0-100"})  # the ranged response path too
    assert status in REFUSED, raw_path


# ---------------------------------------------------------------- positive controls
def _upload(base: str, name: str, data: bytes) -> tuple[int, bytes]:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return request(base, "/gradio_api/upload", "POST", body,
                   {"Content-Type": f"multipart/form-data; boundary={boundary}"})


def test_an_uploaded_file_is_served(base, upload_dir):
    content = f"uploaded-{uuid.uuid4().hex}".encode()
    status, body = _upload(base, "note.txt", content)
    assert status == 200, body
    (path,) = json.loads(body)
    assert Path(path).resolve().is_relative_to(upload_dir.resolve())
    status, served = request(base, "/gradio_api/file=" + quote(path))
    assert status == 200 and served == content


def test_gradio_assets_are_served(base):
    status, body = request(base, "/static/img/logo.svg")
    assert status == 200 and b"<svg" in body
    status, body = request(base, "/")
    assert status == 200 and b"<html" in body.lower()


def test_nothing_outside_is_allowed_by_configuration(server):
    from gradio.data_classes import _StaticFiles

    served = [*server.allowed_paths, *_StaticFiles.all_paths]
    for path in (REPO / "app.py", REPO / "dots3_demo" / "ui" / "app.py", REPO / "assets" / "preview_profile",
                 PASSWD):
        assert not any(path.resolve().is_relative_to(Path(p).resolve()) for p in served), (path, served)


# ---------------------------------------------------------------- /gradio_api/file= and friends
def _attacks(upload: str) -> list[str]:
    up = upload.rstrip("/")
    depth = "../" * (len(Path(up).parts) + 2)
    return [
        "/gradio_api/file=/etc/passwd",
        "/gradio_api/file=%2Fetc%2Fpasswd",
        "/gradio_api/file=//etc/passwd",
        "/gradio_api/file=file:///etc/passwd",
        "/gradio_api/file=/etc/passwd%00.png",
        "/gradio_api/file/etc/passwd",
        "/gradio_api/file//etc/passwd",
        "/file=/etc/passwd",
        f"/gradio_api/file={up}/../../etc/passwd",
        f"/gradio_api/file={up}/{depth}etc/passwd",
        f"/gradio_api/file={up}/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"/gradio_api/file={up}/%252e%252e/%252e%252e/%252e%252e/etc/passwd",
        f"/gradio_api/file={up}/..%2f..%2f..%2f..%2fetc%2fpasswd",
        f"/gradio_api/file={up}/..%5c..%5c..%5cetc%5cpasswd",
        f"/gradio_api/file={up}/....//....//....//etc/passwd",
        f"/gradio_api/file={depth}etc/passwd",
        "/gradio_api/file=../../../../../../../../etc/passwd",
        f"/gradio_api/file={up}/../../proc/self/environ",
        "/gradio_api/file=/proc/self/environ",
        "/gradio_api/file=/proc/self/cwd/app.py",
        "/gradio_api/file=/proc/self/root/etc/passwd",
    ]


def test_system_files_are_refused(base, upload_dir):
    for raw in _attacks(str(upload_dir)):
        assert_refused(base, raw, PASSWD, REPO / "app.py")


def test_environment_is_not_served(base):
    status, body = request(base, "/gradio_api/file=/proc/self/environ")
    assert status in REFUSED and b"PATH=" not in body


def test_a_file_outside_the_upload_folder_is_refused(base, secret, upload_dir):
    up = str(upload_dir).rstrip("/")
    rel = os.path.relpath(secret, upload_dir)
    for raw in (f"/gradio_api/file={secret}", f"/gradio_api/file={quote(str(secret))}",
                f"/gradio_api/file={up}/{rel}", f"/gradio_api/file={up}/{quote(rel, safe='')}"):
        assert_refused(base, raw, secret)


@pytest.mark.parametrize("relative", ["app.py", "dots3_demo/ui/app.py", "dots3_demo/inspection/limits.py",
                                      "README.md", "requirements.txt", "assets/preview_profile/config.json",
                                      ".git/config", "tests/conftest.py"])
def test_the_apps_own_files_are_refused(base, relative):
    path = REPO / relative
    if not path.exists():
        pytest.skip(f"{relative} not in this checkout")
    for raw in (f"/gradio_api/file={path}", f"/gradio_api/file={relative}", f"/gradio_api/file=./{relative}",
                f"/file={path}", f"/gradio_api/file/{path}"):
        assert_refused(base, raw, path)


def test_symlinks_in_the_upload_folder_do_not_lead_out(base, planted, secret):
    real = planted / "real.txt"  # control: a plain file next to the links is served
    real.write_text("plain file in the upload folder")
    status, body = request(base, f"/gradio_api/file={real}")
    assert status == 200 and body == real.read_bytes()
    for name, leaked in (("passwd.txt", PASSWD), ("secret.png", secret), ("app.py", REPO / "app.py"),
                         ("etc/passwd", PASSWD), (f"outside/{secret.name}", secret)):
        assert_refused(base, f"/gradio_api/file={planted}/{name}", leaked)
    # the folder itself (a real directory in the upload folder) is no listing either
    assert_refused(base, f"/gradio_api/file={planted}")


# ---------------------------------------------------------------- the asset routes
@pytest.mark.parametrize("route", ["/static", "/assets", "/svelte", "/gradio_api/custom_component/x/client/y"])
def test_asset_routes_do_not_traverse(base, route):
    for tail in ("../../../../../../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
                 "%252e%252e%252f%252e%252e%252f%252e%252e%252fetc%252fpasswd",
                 "..%5c..%5c..%5c..%5c..%5c..%5cetc%5cpasswd", "%2fetc%2fpasswd", "/etc/passwd",
                 f"..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2f..{quote(str(REPO / 'app.py'), safe='')}"):
        assert_refused(base, f"{route}/{tail}", PASSWD, REPO / "app.py")


def test_gradios_own_python_is_not_served_from_the_asset_routes(base):
    import gradio

    routes_py = Path(gradio.__file__).parent / "routes.py"
    for raw in ("/static/../routes.py", "/static/..%2f..%2froutes.py", "/assets/..%2f..%2f..%2froutes.py",
                "/static/%2e%2e/%2e%2e/routes.py", f"/gradio_api/file={routes_py}"):
        assert_refused(base, raw, routes_py)


# ---------------------------------------------------------------- proxy and URL fetches (SSRF)
def test_proxy_and_url_fetches_do_not_reach_the_host(base):
    port = urlsplit(base).port
    for raw in (f"/gradio_api/proxy=http://127.0.0.1:{port}/gradio_api/file=/etc/passwd",
                f"/gradio_api/proxy=http://127.0.0.1:{port}/config",
                "/gradio_api/proxy=https://example.hf.space/../../etc/passwd",
                f"/gradio_api/file=http://127.0.0.1:{port}/config",
                f"/gradio_api/file=http://localhost:{port}/config",
                "/gradio_api/file=http://169.254.169.254/latest/meta-data/"):
        status, body = request(base, raw)
        assert status >= 400, (raw, status, body[:200])
        assert b"root:x:0:0" not in body and b'"components"' not in body, raw


# ---------------------------------------------------------------- /gradio_api/upload
@pytest.mark.parametrize("name", ["../../../../../tmp/evil-{id}.txt", "..%2f..%2f..%2ftmp%2fevil-{id}.txt",
                                  "/tmp/evil-{id}.txt", "..\\..\\..\\tmp\\evil-{id}.txt"])
def test_upload_names_cannot_leave_the_upload_folder(base, upload_dir, name):
    token = uuid.uuid4().hex
    status, body = _upload(base, name.format(id=token), b"payload " + token.encode())
    if status != 200:
        assert status in REFUSED
        return
    (path,) = json.loads(body)
    assert Path(path).resolve().is_relative_to(upload_dir.resolve()), path
    assert not Path(f"/tmp/evil-{token}.txt").exists()
    assert not list(Path("/tmp").glob(f"*evil-{token}*"))
