"""The ``kbatch`` command line: one module per subcommand, each with ``add_arguments(parser)``
and ``run(args) -> int``.

- ``_main``: the parser of every subcommand, :func:`main` (the ``kbatch`` script), the one-line
  error net under the subcommands;
- ``_dump`` (``kbatch dump``) with its record-value and internal-topic renderers
  (``_dump_values``, ``_dump_internal``);
- ``_sample`` (``kbatch sample``), ``_clean`` (``kbatch clean``), ``_compact``
  (``kbatch compact``: small table files into large ones, the ledger kept), ``_schemas``
  (``kbatch schemas``), ``_index`` (``kbatch index``: the scans' time index, built ahead of
  time); ``kbatch convert`` is the :mod:`kbatch.convert` job's own;
- ``_sql`` (``kbatch sql``) with the DuckDB views it registers (``_sql_views``).

The top layer: it imports the packages below it through their faces, and nothing imports it
but ``kbatch.__main__``.
"""

from ._main import SUBCOMMANDS, build_parser, main

__all__ = ["SUBCOMMANDS", "build_parser", "main"]
