"""The Python SDK worker's boot, for a worker pool outside a container.

Beam's SDK container starts each worker through its `boot` program: it asks
the runner for the job's pipeline options and staged artifacts, installs
the staged packages, and only then starts the SDK harness. A worker pool
started with `worker_pool_main --container_executable=` runs this module
the same way, so that a local cluster's workers, like a pod's, run exactly
the code the job staged (the project's sdist from `--setup_file`, any
`--extra_package`), not whatever this checkout holds:

- the harness runs with `python -S`: the interpreter's site-packages (the
  "image": TFX, Beam, TensorFlow) are on its path, but not their `.pth`
  hooks, so the project's editable install is invisible to it;
- the staged packages are installed with pip into a folder keyed by the
  artifacts' hashes (shared by the job's workers, built once), first on the
  path.

    python -m kubeflow.sdk_worker_boot --id=... --provision_endpoint=... \
        --artifact_endpoint=... --control_endpoint=... --logging_endpoint=...
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict, List

# The staged names of packages the boot installs, as Beam's stager names
# them (apache_beam.runners.portability.stager): the sdist of --setup_file,
# and --extra_package files, listed in extra_packages.txt.
WORKFLOW_TARBALL = "workflow.tar.gz"
EXTRA_PACKAGES_FILE = "extra_packages.txt"
# Where installed packages are kept between workers (one folder per set of
# artifacts): the pool's environment may set it.
CACHE_ENV = "BEAM_WORKER_BOOT_CACHE"


def _parse(argv: List[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("id", "provision_endpoint", "artifact_endpoint",
               "control_endpoint", "logging_endpoint"):
    parser.add_argument(f"--{name}", required=True)
  parser.add_argument("--semi_persist_dir", default=None)
  return parser.parse_args(argv)


def _provision_info(endpoint: str, worker_id: str):
  import grpc  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.portability.api import beam_provision_api_pb2_grpc
  with grpc.insecure_channel(endpoint) as channel:
    stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
    return stub.GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(),
        metadata=[("worker_id", worker_id)]).info


def _fetch_artifacts(endpoint: str, worker_id: str, dependencies,
                     folder: str) -> Dict[str, str]:
  """Writes each staged artifact into `folder`: {staged name: path}."""
  import grpc  # pylint: disable=g-import-not-at-top
  from apache_beam.portability import common_urns
  from apache_beam.portability.api import beam_artifact_api_pb2
  from apache_beam.portability.api import beam_artifact_api_pb2_grpc
  from apache_beam.portability.api import beam_runner_api_pb2
  staging_to = common_urns.artifact_roles.STAGING_TO.urn
  paths = {}
  with grpc.insecure_channel(
      endpoint, options=[("grpc.max_receive_message_length", -1)]) as channel:
    stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
    for dependency in dependencies:
      if dependency.role_urn != staging_to:
        continue
      name = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
          dependency.role_payload).staged_name
      path = os.path.join(folder, name)
      with open(path, "wb") as out:
        for chunk in stub.GetArtifact(
            beam_artifact_api_pb2.GetArtifactRequest(artifact=dependency),
            metadata=[("worker_id", worker_id)]):
          out.write(chunk.data)
      paths[name] = path
  return paths


def _packages(staged: Dict[str, str]) -> List[str]:
  """The staged files to install, in the order Beam's own boot does:
  the extra packages, then the workflow sdist."""
  packages = []
  if EXTRA_PACKAGES_FILE in staged:
    with open(staged[EXTRA_PACKAGES_FILE]) as listing:
      packages += [staged[line.strip()] for line in listing if line.strip()]
  if WORKFLOW_TARBALL in staged:
    packages.append(staged[WORKFLOW_TARBALL])
  return packages


def _digest(paths: List[str]) -> str:
  digest = hashlib.sha256()
  for path in paths:
    with open(path, "rb") as f:
      digest.update(hashlib.sha256(f.read()).digest())
  return digest.hexdigest()[:16]


def install_staged(packages: List[str], cache: str) -> str:
  """The folder holding `packages` installed (without their dependencies,
  which the image has), built once per set of packages."""
  target = os.path.join(cache, _digest(packages))
  if os.path.isdir(target):
    return target
  os.makedirs(cache, exist_ok=True)
  building = tempfile.mkdtemp(dir=cache, prefix=".installing-")
  if packages:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", building,
                    *packages], check=True, stdout=sys.stderr)
  try:
    os.rename(building, target)  # Atomic: another worker may have won.
  except OSError:
    shutil.rmtree(building, ignore_errors=True)
  return target


def main(argv: List[str]) -> int:
  args = _parse(argv)
  info = _provision_info(args.provision_endpoint, args.id)
  work = args.semi_persist_dir or tempfile.mkdtemp(prefix="beam-worker-")
  staged_dir = os.path.join(work, "staged", args.id)
  os.makedirs(staged_dir, exist_ok=True)
  staged = _fetch_artifacts(args.artifact_endpoint, args.id,
                            info.dependencies, staged_dir)
  cache = os.environ.get(CACHE_ENV) or os.path.join(work, "installed")
  installed = install_staged(_packages(staged), cache)
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  env = dict(os.environ)
  env.update({
      "PYTHONPATH": os.pathsep.join([installed,
                                     sysconfig.get_paths()["purelib"]]),
      "WORKER_ID": args.id,
      "PIPELINE_OPTIONS": json.dumps(
          json_format.MessageToDict(info.pipeline_options)),
      "SEMI_PERSISTENT_DIRECTORY": work,
      "CONTROL_API_SERVICE_DESCRIPTOR": f'url: "{args.control_endpoint}"',
      "LOGGING_API_SERVICE_DESCRIPTOR": f'url: "{args.logging_endpoint}"',
      "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
  })
  os.execve(sys.executable,
            [sys.executable, "-S", "-m",
             "apache_beam.runners.worker.sdk_worker_main"], env)
  return 0  # Not reached.


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
