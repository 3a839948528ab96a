"""Running a search: the campaign (``campaign``) and its ask-measure-tell loop (``loop``), sweeps of a grid
(``sweep``), and the offline comparison of algorithms (``compare``)."""
