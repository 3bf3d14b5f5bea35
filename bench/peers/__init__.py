"""bench.lifecycle's peers: pgqueuer (in the project's venv, dev extra) and DBOS and
procrastinate, which run only in bench's own peer venv (bench/peers/env.py). The modules the
peer venv runs (``dbos_peer``, ``procrastinate_peer``, ``protocol``) import nothing of the
project: standard library, psycopg and the peer itself."""
