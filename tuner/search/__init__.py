"""Running a search: the campaign (``campaign``, defined and checked by a ``spec``) and its ask-measure-tell loop
(``loop``), sweeps of a grid (``sweep``), and the offline comparison of algorithms (``compare``)."""
