"""What the device run ran on, as JSON: the GPU and driver (nvidia-smi), Python, torch and its CUDA, JAX
and its devices, which lintloop was imported (the carried wheel or the checkout), and whether every
requirement of lintloop and of the carried wheels is met by what is importable (`pip install --no-deps`
installs them without checking).

    python3 bench/gpu/env_report.py --wheels .whl --mode wheel --output versions.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

SMI_FIELDS = ("name", "driver_version", "memory.total", "compute_cap")


def _failure(exc: BaseException) -> dict[str, str]:
    return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def nvidia_smi() -> dict[str, Any]:
    try:
        query = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30, check=False)
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30,
                                check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _failure(exc)
    if query.returncode != 0:
        return {"error": (query.stderr or query.stdout).strip()[:300]}
    gpus = [dict(zip(SMI_FIELDS, (v.strip() for v in line.split(",")))) for line in query.stdout.splitlines()]
    # The driver's CUDA version is only in the plain output's header ("CUDA Version: 13.0").
    cuda = next((line.split("CUDA Version:")[1].split("|")[0].strip() for line in header.splitlines()
                 if "CUDA Version:" in line), None)
    return {"gpus": gpus, "driver_cuda": cuda}


def torch_info() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # absent, or a broken install: recorded, not fatal
        return _failure(exc)
    info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": torch.backends.cudnn.version(), "cuda_available": torch.cuda.is_available(),
                            "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
    return info


def jax_info() -> dict[str, Any]:
    try:
        import jax
        import jaxlib

        return {"version": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend(),
                "devices": [str(d) for d in jax.devices()],
                "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "(unset: 75% of GPU memory)")}
    except Exception as exc:
        return _failure(exc)


def lintloop_info(mode: str, fingerprints: list[str]) -> dict[str, Any]:
    try:
        import lintloop
    except Exception as exc:
        return {"mode": mode, **_failure(exc)}
    return {"mode": mode, "version": lintloop.__version__, "imported_from": str(Path(lintloop.__file__).parent),
            "fingerprints": fingerprints}


def _requirements_of(wheel: Path) -> tuple[str, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = archive.read(name).decode()
    dist = next(line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Name:"))
    return dist, [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]


def unmet_requirements(wheels: Path) -> list[str]:
    """Each requirement (extras left out, markers evaluated here) of a carried wheel that no importable
    distribution satisfies."""
    from packaging.requirements import Requirement  # in the device image, beside pip

    unmet = []
    for wheel in sorted(wheels.glob("*.whl")):
        dist, requires = _requirements_of(wheel)
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                unmet.append(f"{dist}: {text} (not installed)")
                continue
            if not req.specifier.contains(version, prereleases=True):
                unmet.append(f"{dist}: {text} (found {version})")
    return unmet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path(".whl"), help="the carried wheels' folder")
    parser.add_argument("--mode", default="?", help="how run.sh put lintloop on the path (wheel|checkout)")
    parser.add_argument("--fingerprint", action="append", default=[], help="NAME=HASH, recorded as given")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    report: dict[str, Any] = {
        "python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
        "cpus": os.cpu_count(), "nvidia_smi": nvidia_smi(), "torch": torch_info(), "jax": jax_info(),
        "tensorflow": "installed" if importlib.util.find_spec("tensorflow") else "not installed",
        "lintloop": lintloop_info(args.mode, args.fingerprint),
    }
    try:
        report["unmet_requirements"] = unmet_requirements(args.wheels)
    except Exception as exc:
        report["unmet_requirements"] = [f"not checked: {type(exc).__name__}: {exc}"]
    args.output.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
