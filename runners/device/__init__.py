"""Real devices: loop or block targets, file systems, queue settings, fio and Filebench."""
