"""Fetch the Apache Kafka broker jars with Maven, once, into ``<data_dir>/kafka/libs``.

The pom next to this file (``infra/kafka/pom.xml``) names the broker and its runtime
dependencies; ``mvn dependency:copy-dependencies`` copies them from Maven Central (or the local
``~/.m2`` cache). A stamp file holding the pom's hash makes a second call a no-op, and a changed
pom replaces the whole folder so two Kafka versions never share a class path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from infra.runtime.errors import UserError

log = logging.getLogger("flywheel.kafka")

POM = Path(__file__).parent / "pom.xml"
STAMP = ".flywheel-fetched"
FETCH_TIMEOUT_S = 900


def pom_hash(pom: Path = POM) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def jars_ready(libs: Path, pom: Path = POM) -> bool:
    stamp = libs / STAMP
    return stamp.is_file() and stamp.read_text().strip() == pom_hash(pom)


def java_executable() -> str:
    """JAVA_HOME/bin/java when JAVA_HOME is set, else ``java`` from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise UserError(
            "java not found: install Java 17 or newer (Debian: apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    return found


def _mvn_error_line(output: str) -> str:
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    for line in output.splitlines():
        if "[ERROR]" in line and line.strip() != "[ERROR]":
            return line.replace("[ERROR]", "").replace(" -> [Help 1]", "").strip()
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def fetch_jars(libs: Path, pom: Path = POM) -> bool:
    """Make sure ``libs`` holds the jars the pom names; returns True when it had to fetch."""
    if jars_ready(libs, pom):
        return False
    mvn = shutil.which("mvn")
    if not mvn:
        raise UserError("mvn not found: install Maven (Debian: apt-get install maven) to fetch the Kafka jars")
    staging = libs.with_name(libs.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
    ]
    log.info("fetching the Kafka jars with mvn into %s (once)", libs)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"mvn did not finish fetching the Kafka jars within {FETCH_TIMEOUT_S}s") from None
    if proc.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
        raise UserError(f"mvn could not fetch the Kafka jars: {_mvn_error_line(proc.stdout + proc.stderr)}")
    (staging / STAMP).write_text(pom_hash(pom) + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    log.info("fetched %d jars in %.1fs", len(list(libs.glob("*.jar"))), time.monotonic() - t0)
    return True
