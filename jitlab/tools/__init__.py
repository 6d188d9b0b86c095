"""Tools over a snippet that need no GPU: ``inspect`` (resources, occupancy, PTX, SASS) and
``export`` (an installable setup.py package, from the templates in ``templates/``, written by
``package_files``).
"""
