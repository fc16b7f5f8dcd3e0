"""The carbon model as data plus pure functions (docs/carbon-model.md).

``model``: constants, the intensity table and time profiles, PUE, I/O weights (``CarbonModel``);
``regions``: the region -> provider/zone table and pinned values; ``data/``: the derived 2022
profiles with their ODbL notice; ``tagcodes``: model tags as ordered codes; ``partial``: the
mergeable window state the scorer fills; ``signals``: what live sources publish; ``cells``:
span start times -> month x hour cells of an intensity row; ``names``: service and endpoint
names bounded to what the report (and the aggregator) keeps.
"""
