"""Task and Resources: the SDK form of a task YAML (SkyPilot's sky.Task / sky.Resources)."""

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from herd import yaml_emit

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
Number = Union[int, float]
Script = Union[None, str, Sequence[str]]


def _check_amount(field: str, value: Any) -> Union[None, Number, str]:
    """cpus / memory: a number, or a string such as "4" or "4+" (at least 4)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Resources({field}=...) takes a number or a string like '4+', "
                        f"got {value!r}")
    if value <= 0:
        raise ValueError(f"Resources({field}={value!r}) must be positive")
    return value


def _accelerators_text(value: Any) -> Union[None, str, List[str]]:
    """'L4:4' as is; {'L4': 4} -> 'L4:4'; several names (a dict or a list) are alternatives."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        items = []
        for name, count in value.items():
            if not isinstance(name, str) or isinstance(count, bool) or not isinstance(
                    count, (int, float)):
                raise TypeError(f"Resources(accelerators={value!r}): expected {{'L4': 4}}")
            items.append(f"{name}:{count}")
        return items[0] if len(items) == 1 else items
    if isinstance(value, (list, tuple, set, frozenset)):
        if not all(isinstance(v, str) for v in value):
            raise TypeError(f"Resources(accelerators={value!r}): expected strings like 'L4:4'")
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    raise TypeError(f"Resources(accelerators={value!r}): expected 'L4:4' or {{'L4': 4}}")


class Resources:
    """What a task needs on each node.

    cpus / memory: 4 or "4+" (at least 4; memory in GB). accelerators: "L4:4", "H100" (one),
    {"L4": 4}, or a list of alternatives. infra: "aws", "aws/us-east-1", "k8s/<ctx>",
    "ssh/<pool>", "local". ports: 8080, "10000-10100" or a list of them. image_id:
    "docker:IMAGE" runs setup and run in that container image on every node.
    """

    def __init__(self, cpus: Union[None, Number, str] = None,
                 memory: Union[None, Number, str] = None,
                 accelerators: Union[None, str, Mapping[str, Number], Sequence[str]] = None,
                 infra: Optional[str] = None,
                 ports: Union[None, int, str, Sequence[Union[int, str]]] = None,
                 disk_size: Optional[int] = None,
                 use_spot: Optional[bool] = None,
                 image_id: Optional[str] = None):
        self.cpus = _check_amount("cpus", cpus)
        self.memory = _check_amount("memory", memory)
        self.accelerators = _accelerators_text(accelerators)
        if infra is not None and not isinstance(infra, str):
            raise TypeError(f"Resources(infra={infra!r}) takes a string such as 'aws/us-east-1'")
        self.infra = infra
        if ports is None or isinstance(ports, (int, str)) and not isinstance(ports, bool):
            self.ports = ports
        elif isinstance(ports, (list, tuple)) and all(
                isinstance(p, (int, str)) and not isinstance(p, bool) for p in ports):
            self.ports = list(ports)
        else:
            raise TypeError(f"Resources(ports={ports!r}) takes 8080, '10000-10100' or a list")
        if disk_size is not None and (isinstance(disk_size, bool) or
                                      not isinstance(disk_size, int) or disk_size <= 0):
            raise ValueError(f"Resources(disk_size={disk_size!r}) takes a positive number of GB")
        self.disk_size = disk_size
        if use_spot is not None and not isinstance(use_spot, bool):
            raise TypeError(f"Resources(use_spot={use_spot!r}) takes True or False")
        self.use_spot = use_spot
        if image_id is not None and (not isinstance(image_id, str) or not image_id):
            raise TypeError(f"Resources(image_id={image_id!r}) takes a string such as "
                            "'docker:nvcr.io/nvidia/pytorch:24.01-py3'")
        self.image_id = image_id

    _FIELDS = ("cpus", "memory", "accelerators", "infra", "ports", "disk_size", "use_spot",
               "image_id")

    def copy(self, **overrides: Any) -> "Resources":
        """A copy with some fields replaced, as sky.Resources.copy."""
        fields = {f: getattr(self, f) for f in self._FIELDS}
        fields.update(overrides)
        return Resources(**fields)

    def to_yaml_config(self) -> Dict[str, Any]:
        """The `resources:` mapping of a task YAML; unset fields are left out."""
        return {f: getattr(self, f) for f in self._FIELDS if getattr(self, f) is not None}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resources) and self.to_yaml_config() == other.to_yaml_config()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_yaml_config().items())
        return f"Resources({args})"


def _script(field: str, value: Script) -> Optional[str]:
    """setup/run: a string, or a list of command lines joined with newlines (as SkyPilot)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    raise TypeError(f"Task({field}=...) takes a string or a list of strings, got {value!r}")


def _vars(field: str, value: Optional[Mapping[str, Any]]) -> Dict[str, Optional[str]]:
    """envs/secrets: NAME -> value as a string; None means "must be given at launch"."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"Task({field}=...) takes a mapping of NAME: value, got {value!r}")
    out: Dict[str, Optional[str]] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValueError(f"Task({field}=...): invalid variable name {name!r}: use letters, "
                             "digits and '_', not starting with a digit")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise TypeError(f"Task({field}=...): {name} must be a string, number or bool, "
                            f"got {v!r}")
        out[name] = None if v is None else str(v)
    return out


def _local_path(path: str, base: str) -> str:
    """A local path as the CLI should see it, independent of where the YAML file lies: ~
    expanded, relative paths taken from the caller's working directory. Paths that start with a
    ${VAR} (substituted by herd) and URLs are left alone."""
    if "://" in path:
        return path
    path = os.path.expanduser(path)
    if os.path.isabs(path) or path.startswith("$"):
        return path
    return os.path.normpath(os.path.join(base, path))


class Task:
    """A task: what to run, on how many nodes, with which resources.

    setup and run are bash scripts (a string, or a list of lines joined with newlines); they
    run in ~/sky_workdir when workdir (a local directory, synced to every node) is given. envs
    and secrets are exported into both; a value of None must be supplied at launch. Relative
    local paths (workdir, file_mounts sources) are taken from the current directory at the time
    the Task is made.
    """

    def __init__(self, name: Optional[str] = None, *,
                 setup: Script = None,
                 run: Script = None,
                 envs: Optional[Mapping[str, Any]] = None,
                 secrets: Optional[Mapping[str, Any]] = None,
                 workdir: Optional[str] = None,
                 num_nodes: Optional[int] = None,
                 resources: Optional[Resources] = None,
                 file_mounts: Optional[Mapping[str, str]] = None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Task(name={name!r}) takes a string")
        self.name = name
        self.setup = _script("setup", setup)
        self.run = _script("run", run)
        self.envs = _vars("envs", envs)
        self.secrets = _vars("secrets", secrets)
        base = os.getcwd()
        if workdir is not None and not isinstance(workdir, str):
            raise TypeError(f"Task(workdir={workdir!r}) takes a path")
        self.workdir = None if workdir is None else _local_path(workdir, base)
        if num_nodes is not None and (isinstance(num_nodes, bool) or
                                      not isinstance(num_nodes, int) or num_nodes < 1):
            raise ValueError(f"Task(num_nodes={num_nodes!r}) takes a positive integer")
        self.num_nodes = num_nodes
        self.resources: Optional[Resources] = None
        self.set_resources(resources)
        self.file_mounts: Dict[str, str] = {}
        for remote, local in (file_mounts or {}).items():
            if not isinstance(remote, str) or not isinstance(local, str):
                raise TypeError("Task(file_mounts=...) maps '/remote/path' to '/local/path', "
                                f"got {remote!r}: {local!r}")
            self.file_mounts[remote] = _local_path(local, base)

    def set_resources(self, resources: Optional[Resources]) -> "Task":
        if resources is not None and not isinstance(resources, Resources):
            raise TypeError(f"Task(resources=...) takes a herd.Resources, got {resources!r}")
        self.resources = resources
        return self

    def update_envs(self, envs: Mapping[str, Any]) -> "Task":
        self.envs.update(_vars("envs", envs))
        return self

    def update_secrets(self, secrets: Mapping[str, Any]) -> "Task":
        self.secrets.update(_vars("secrets", secrets))
        return self

    def to_yaml_config(self) -> Dict[str, Any]:
        """The task YAML as a dict (the order of a hand-written file); unset fields left out."""
        config: Dict[str, Any] = {}
        if self.name is not None:
            config["name"] = self.name
        if self.num_nodes is not None:
            config["num_nodes"] = self.num_nodes
        if self.resources is not None and self.resources.to_yaml_config():
            config["resources"] = self.resources.to_yaml_config()
        if self.envs:
            config["envs"] = dict(self.envs)
        if self.secrets:
            config["secrets"] = dict(self.secrets)
        if self.workdir is not None:
            config["workdir"] = self.workdir
        if self.file_mounts:
            config["file_mounts"] = dict(self.file_mounts)
        if self.setup is not None:
            config["setup"] = self.setup
        if self.run is not None:
            config["run"] = self.run
        return config

    def to_yaml(self, path: Optional[str] = None) -> str:
        """The task YAML (secrets included, as the CLI needs them); written to path, readable by
        its owner only, when path is given."""
        text = yaml_emit.dump(self.to_yaml_config())
        if path is not None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def __repr__(self) -> str:
        config = self.to_yaml_config()
        if "secrets" in config:
            config["secrets"] = {k: "<redacted>" for k in config["secrets"]}
        args = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return f"Task({args})"
