"""The programs: `mpijob` (and the reference's `mpi-operator`) and the kubectl plugin.

Every process of ours starts here (the console scripts, `python -m mpijob`, the image's entrypoints, the
krew launchers), before any command module imports kubernetes_asyncio: its generated models then load on
first use only (~34 MiB less RSS; mpijob/lazyk8s.py). Importing the library's other packages changes no
module of anyone else's.
"""

from mpijob import lazyk8s as _lazyk8s

_lazyk8s.install()
