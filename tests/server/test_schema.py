"""Schema fuzzing: schemathesis generates requests from /openapi.json (valid and invalid ones)
for every operation and checks each response: no 5xx, a documented status, a documented
content type, and a body that matches the documented schema."""

import os
import re
import subprocess
import sys

from conftest import API_KEY, Server

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_schemathesis_finds_no_server_error_or_schema_violation(deepinfer, tiny_model, artifacts, request):
    examples = request.config.getoption("--schema-examples")
    # A short context and few running requests keep each generated request quick.
    server = Server(deepinfer, ["--model", tiny_model, "--api-key", API_KEY, "--max-model-len", "48",
                                "--max-running", "4", "--max-queue", "4", "--no-access-log"])
    try:
        st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
        result = subprocess.run(
            [st, "run", server.url + "/openapi.json", "--checks", CHECKS, "--max-examples", str(examples),
             "--seed", "1", "--workers", "1", "--phases", "examples,coverage,fuzzing", "--request-timeout", "120",
             "-H", "Authorization: Bearer " + API_KEY, "--report", "junit", "--report-dir",
             os.path.join(artifacts, "schemathesis")],
            capture_output=True, text=True, timeout=1200, cwd=artifacts)  # its cache folder lands there
        output = result.stdout + result.stderr
        print(output[-3000:])
        assert result.returncode == 0, output[-20000:]
        assert re.search(r"\d+ passed", output), output[-3000:]
    finally:
        server.assert_clean_exit()
