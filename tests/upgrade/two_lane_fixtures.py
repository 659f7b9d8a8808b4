"""A synthetic two-lane plugin (`myplug`, release lane upkg 1.0 + main lane) against upkg 1.0 -> 2.0:
one construct per lane verdict, typed receiver, installed patch and precision rule. No network."""

from __future__ import annotations

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/worker_base.py": "class WorkerBase:\n    def load_model(self):\n        pass\n",
    "upkg/executor.py": "def run(ex):\n    ex.collective_rpc('load_model')\n",
    "upkg/_impl.py": "def aliased(x):\n    return x\n",
    "upkg/core.py": """
        from abc import ABC, abstractmethod

        def old_api():
            return 1

        def still_old():
            return 1

        def hook_fn(a):
            return a

        def aliased(x):
            return x

        def make2(a):
            return a

        def compute(logits, temperature):
            scaled = logits / temperature
            total = sum(scaled) if scaled else 0
            probs = [s / total for s in scaled]
            return probs

        class Runner:
            def __init__(self, size):
                self.size = size
                self.cache = {}

            def execute(self, batch, mode=None):
                return batch

            def prepare(self, x):
                return x

            @classmethod
            def create(klass, size):
                return klass(size)

            def hook(self, a):
                return a

        def make_runner(size) -> "Runner | None":
            return Runner(size)

        class Worker(ABC):
            @abstractmethod
            def run(self):
                ...

        class Thing:
            def go(self):
                return 1

        class Mover:
            def run(self, batch):
                return batch
        """,
}

NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/worker_base.py": "class WorkerBase:\n    def load_model(self):\n        pass\n",
    "upkg/executor.py": "def run(ex):\n    ex.collective_rpc('load_model')\n    ex.collective_rpc(\"reset_cache\", timeout=1)\n",
    "upkg/_impl.py": "def aliased(x):\n    return x\n",
    "upkg/new/__init__.py": "",
    "upkg/new/place.py": """
        class Mover:
            def run(self, batch, extra):
                return batch
        """,
    "upkg/core.py": """
        from abc import ABC, abstractmethod
        from typing import Optional
        from upkg._impl import aliased

        def new_api():
            return 1

        def still_old():
            return 1

        def hook_fn(a, b):
            return a

        def make2(a):
            return a

        def compute(logits, temperature):
            scaled = logits / max(temperature, 1e-5)
            total = sum(scaled) if scaled else 0
            probs = [s / total for s in scaled]
            return probs

        class Runner:
            def __init__(self, size):
                self.size = size

            def execute(self, batches, mode=None):
                return batches

            @classmethod
            def create(klass, size):
                return klass(size)

            def hook(self, a, scale=1.0):
                return a

        def make_runner(size) -> Optional[Runner]:
            return Runner(size)

        class Worker(ABC):
            @abstractmethod
            def run(self):
                ...

            @abstractmethod
            def sample_tokens(self):
                ...

        class Thing:
            def go(self):
                return 1

            def stop(self):
                return 0
        """,
}

PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n\nUPKG_VERSION = (1, 0)\n",
    "myplug/lanes.py": """
        import upkg.core
        from myplug.utils import upkg_version_is

        if upkg_version_is("1.0"):
            from upkg.core import old_api  # release lane: gone at 2.0
        else:
            from upkg.core import new_api  # main lane: fine at 2.0

        if upkg_version_is("1.0"):
            from upkg.core import still_old  # 2.0 still behaves like 1.0
        else:
            from upkg.core import main_only  # only vllm main has it: breaks at 2.0

        if upkg_version_is("0.5"):
            STALE = 1
        else:
            STALE = 2

        if upkg_version_is("1.0"):
            from myplug import legacy_path
        """,
    "myplug/legacy_path.py": "from upkg.core import old_api as legacy\n",
    "myplug/typed.py": """
        import upkg.core
        from upkg.core import Runner, Worker, Thing, make2, make_runner
        from myplug.utils import upkg_version_is


        class NPUWorkerWrapper:
            def __init__(self, runner: Runner):
                self.runner = runner

            def go(self):
                kwargs = {"batch": 1}
                self.runner.execute(**kwargs)
                Runner.create(4)


        class NPURunner(Runner):
            def go(self):
                self.prepare(x=1)
                return self.cache

            def hook(self, a):
                return a


        class NPUWorker(Worker):
            def run(self):
                return 1

            if not upkg_version_is("1.0"):
                def sample_tokens(self):
                    return 0


        def my_hook(a):
            return a


        def my_compute(logits, temperature):
            scaled = logits / temperature
            total = sum(scaled) if scaled else 0
            probs = [s / total for s in scaled]
            return probs


        def my_aliased(x):
            return x


        class StandIn:
            def go(self):
                return 2


        def my_make2(a, flag=False):
            return a


        upkg.core.hook_fn = my_hook
        upkg.core.compute = my_compute
        upkg.core.aliased = my_aliased
        upkg.core.Thing = StandIn
        upkg.core.make2 = my_make2


        def use():
            make2(1, flag=True)  # runs my_make2: no upstream signature to check
            runner = make_runner(2)
            runner.execute(batch=3)  # typed by make_runner's return annotation
        """,
    "myplug/worker.py": """
        from upkg.worker_base import WorkerBase


        class NPUWorker(WorkerBase):
            def load_model(self):
                return 1


        class NPUWorkerDone(WorkerBase):
            def reset_cache(self):
                return 0
        """,
    "myplug/moved.py": """
        from upkg.core import Mover


        class NPUMover(Mover):
            def run(self, batch):
                return batch
        """,
}
