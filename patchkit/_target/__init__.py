"""Code that runs in the target's interpreter: the Python that runs vLLM, not the one running patchkit.

Each module here is a worker, run by path (`python [-I] -B <module>.py ANSWER`) by
patchkit.tree.target.run_worker: it reads a JSON request on stdin and writes a JSON answer to the file
ANSWER (atomically; a worker may write it more than once, to report progress). That interpreter
does not have patchkit, so the workers are standalone: the standard library only, no import of
patchkit or of each other, and Python 3.9 syntax and library (the target may be older than patchkit's
own interpreter). When the target's interpreter is the one running patchkit, run_worker may call a
worker's `work(request)` in-process instead.
"""
