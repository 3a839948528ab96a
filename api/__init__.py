"""How people drive StoreTune: the command line (``cli``) and the REST service (``service``), which import each
other never, and share the settings (``settings``), the public shape of a trial (``public``) and the report
(``report``)."""
