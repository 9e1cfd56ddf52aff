"""Write docs/models/patch_network.model3, the example model a user opens in
the graphical modeler (run once; the file is committed).

    .venv/bin/python scripts/make_example_model.py

The chain sets only the parameters the algorithm dialogs show by default
(the advanced ones are left unset, which means their defaults):

1. Connected components labels the habitat patches (non-zero cells,
   8-connected);
2. Cost distance takes the label raster as its source raster: the cost of
   reaching the nearest patch from every cell, and which patch that is;
3. Minimum spanning tree of that accumulated cost: the cheapest tree that
   joins every reached cell, with its edges as lines.
"""

import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsProcessingModelAlgorithm,  # noqa: E402
                       QgsProcessingModelChildAlgorithm,
                       QgsProcessingModelChildParameterSource,
                       QgsProcessingModelOutput, QgsProcessingModelParameter,
                       QgsProcessingParameterRasterLayer)
from qgis.PyQt.QtCore import QPointF  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_PATH = os.path.join(ROOT, "docs", "models", "patch_network.model3")

DESCRIPTION = (
    "Joins habitat patches over a cost surface. Connected components labels "
    "the patches (non-zero cells of the habitat raster, 8-connected); cost "
    "distance uses the label raster as its source raster to find, for every "
    "cell, the cost of reaching the nearest patch and which patch that is; "
    "the minimum spanning tree of that accumulated cost gives the cheapest "
    "network of moves joining every reached cell. The habitat and cost "
    "rasters must share one grid (same CRS, extent and cell size).")


def static(value):
    return [QgsProcessingModelChildParameterSource.fromStaticValue(value)]


def model_input(name):
    return [QgsProcessingModelChildParameterSource.fromModelParameter(name)]


def child_output(child_id, output):
    return [QgsProcessingModelChildParameterSource.fromChildOutput(
        child_id, output)]


def child(algorithm_id, child_id, description, x, y, sources, outputs):
    """A child algorithm with ``sources`` {parameter: sources} and
    ``outputs`` {model output name: (child output, description)}."""
    algorithm = QgsProcessingModelChildAlgorithm(algorithm_id)
    algorithm.setChildId(child_id)
    algorithm.setDescription(description)
    algorithm.setPosition(QPointF(x, y))
    for name, value in sources.items():
        algorithm.addParameterSources(name, value)
    model_outputs = {}
    for name, (output_name, output_description) in outputs.items():
        output = QgsProcessingModelOutput(name, output_description)
        output.setChildId(child_id)
        output.setChildOutputName(output_name)
        model_outputs[name] = output
    algorithm.setModelOutputs(model_outputs)
    return algorithm


def build_model():
    """The patch network model (needs the gridgraph provider registered)."""
    model = QgsProcessingModelAlgorithm("Patch network", "GridGraph examples")
    model.setHelpContent({"ALG_DESC": DESCRIPTION})
    for name, description, x in (
            ("habitat", "Habitat raster (non-zero cells are patches)", 120),
            ("cost", "Cost raster (cost of crossing each cell)", 460)):
        component = QgsProcessingModelParameter(name)
        component.setPosition(QPointF(x, 60))
        model.addModelParameter(
            QgsProcessingParameterRasterLayer(name, description), component)

    model.addChildAlgorithm(child(
        "gridgraph:connectedcomponents", "components", "Label the patches",
        120, 200,
        {"INPUT": model_input("habitat"), "BAND": static(1),
         "MODE": static(1),  # nonzero: every non-zero cell is habitat
         "CONNECTIVITY": static(1)},  # eight
        {"labels": ("OUTPUT", "Patch labels")}))
    model.addChildAlgorithm(child(
        "gridgraph:costdistance", "costdistance",
        "Cost distance from the patches", 460, 340,
        {"INPUT": model_input("cost"), "BAND": static(1),
         "SOURCE_RASTER": child_output("components", "OUTPUT"),
         "CONNECTIVITY": static(1),  # eight
         "MAX_COST": static(0), "MAP_UNITS": static(False)},
        {"accumulated": ("OUTPUT", "Accumulated cost to the nearest patch"),
         "allocation": ("OUTPUT_ALLOCATION", "Nearest patch")}))
    model.addChildAlgorithm(child(
        "gridgraph:minimumspanningtree", "mst",
        "Minimum spanning tree of the accumulated cost", 460, 480,
        {"INPUT": child_output("costdistance", "OUTPUT"), "BAND": static(1),
         "WEIGHT": static(0),  # the larger of the two cells' costs
         "CONNECTIVITY": static(1),  # eight
         "MAX_LINES": static(1000000)},
        {"tree": ("OUTPUT_LINES", "Tree edges"),
         "direction": ("OUTPUT_DIRECTION", "Parent direction")}))
    model.updateDestinationParameters()
    return model


def main():
    application = QgsApplication([], False)
    application.initQgis()
    sys.path.append(os.path.join(application.pkgDataPath(), "python",
                                 "plugins"))
    from processing.core.Processing import Processing
    Processing.initialize()
    from gridgraph.provider import GridGraphProvider
    provider = GridGraphProvider()  # the registry does not keep it alive
    QgsApplication.processingRegistry().addProvider(provider)
    model = build_model()
    ok, issues = model.validate()
    assert ok, issues
    os.makedirs(os.path.dirname(MODEL_PATH), exist_ok=True)
    assert model.toFile(MODEL_PATH)
    print(MODEL_PATH, [d.name() for d in model.parameterDefinitions()])


if __name__ == "__main__":
    main()
