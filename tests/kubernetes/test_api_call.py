"""kubernetes/api.call without a server: what each way a request can go wrong is said as (the client's own
exceptions and answers, raised and returned by stand-in methods)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from gpucheck.kubernetes import api


def refused(status: int, message: str):
    def method(*args, **kwargs):
        exc = ApiException(status=status, reason="Refused")
        exc.body = json.dumps({"kind": "Status", "message": message})
        raise exc
    return method


def answering(data: bytes):
    return lambda *args, **kwargs: SimpleNamespace(data=data)


def raising(exc: Exception):
    def method(*args, **kwargs):
        raise exc
    return method


@pytest.mark.parametrize(("method", "kind", "says"), [
    (answering(b'{"kind": "Node"}'), None, ""),
    (refused(403, "secrets is forbidden: User x cannot create resource secrets"), api.Everywhere,
     "cannot create Secret gpucheck/j: 403 secrets is forbidden: User x cannot create resource secrets (the "
     "account's rights: gpucheck's own are deploy/kubernetes/10-rbac.yaml's)"),
    (refused(404, "nodes gpu-9 not found"), api.NotFound, "cannot create Secret gpucheck/j: 404 nodes gpu-9"),
    (refused(409, "changed"), api.Conflict, "cannot create Secret gpucheck/j: it changed meanwhile"),
    (answering(b"<html>Proxy login</html>"), api.Everywhere,
     "cannot create Secret gpucheck/j: the answer is not the API server's (not JSON"),
    (raising(MaxRetryError(None, "/api", "Connection refused")), api.Everywhere,
     "cannot create Secret gpucheck/j: the API server did not answer"),
    (raising(ValueError("Missing the required parameter `body`")), api.KubernetesError,
     "cannot create Secret gpucheck/j: Missing the required parameter `body`"),
])
def test_each_way_a_request_goes_wrong_is_one_line_naming_it(method, kind, says) -> None:
    if kind is None:
        assert api.call("create Secret gpucheck/j", method) == {"kind": "Node"}
        return
    with pytest.raises(api.KubernetesError) as caught:
        api.call("create Secret gpucheck/j", method)
    assert type(caught.value) is kind and str(caught.value).startswith(says), str(caught.value)
    assert "\n" not in str(caught.value)
