"""Regenerate tests/data/patch_distance.model3 (run once; the file is committed).

    .venv/bin/python tests/data/make_patch_distance_model.py

The model chains gridgraph:connectedcomponents (patches: non-zero cells,
8-connected) into gridgraph:costdistance, whose SOURCE_RASTER is the label
raster: accumulated cost to the nearest patch and the patch each cell is
allocated to.
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

MODEL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "patch_distance.model3")


def static(value):
    return [QgsProcessingModelChildParameterSource.fromStaticValue(value)]


def build_model():
    model = QgsProcessingModelAlgorithm("Patch distance", "GridGraph examples")
    model.setHelpContent({"ALG_DESC": (
        "Labels the patches (non-zero cells, 8-connected) of a habitat raster "
        "with gridgraph:connectedcomponents, then uses the label raster as "
        "SOURCE_RASTER of gridgraph:costdistance over a cost raster on the "
        "same grid: accumulated cost to the nearest patch, and the patch "
        "(its label) each cell is allocated to.")})
    for name, description, x in (("patches", "Habitat patches (non-zero cells)", 120),
                                 ("cost", "Cost raster", 460)):
        component = QgsProcessingModelParameter(name)
        component.setPosition(QPointF(x, 60))
        model.addModelParameter(
            QgsProcessingParameterRasterLayer(name, description), component)

    components = QgsProcessingModelChildAlgorithm("gridgraph:connectedcomponents")
    components.setChildId("components")
    components.setDescription("Label the patches")
    components.setPosition(QPointF(120, 200))
    components.addParameterSources("INPUT", [
        QgsProcessingModelChildParameterSource.fromModelParameter("patches")])
    components.addParameterSources("BAND", static(1))
    components.addParameterSources("MODE", static(1))  # nonzero
    components.addParameterSources("CONNECTIVITY", static(1))  # eight
    labels = QgsProcessingModelOutput("labels", "Patch labels")
    labels.setChildId("components")
    labels.setChildOutputName("OUTPUT")
    components.setModelOutputs({"labels": labels})
    model.addChildAlgorithm(components)

    distance = QgsProcessingModelChildAlgorithm("gridgraph:costdistance")
    distance.setChildId("costdistance")
    distance.setDescription("Cost distance from the patches")
    distance.setPosition(QPointF(460, 340))
    distance.addParameterSources("INPUT", [
        QgsProcessingModelChildParameterSource.fromModelParameter("cost")])
    distance.addParameterSources("BAND", static(1))
    distance.addParameterSources("SOURCE_RASTER", [
        QgsProcessingModelChildParameterSource.fromChildOutput(
            "components", "OUTPUT")])
    distance.addParameterSources("CONNECTIVITY", static(1))  # eight
    distance.addParameterSources("MAX_COST", static(0))
    distance.addParameterSources("MAP_UNITS", static(False))
    outputs = {}
    for name, child_output, description in (
            ("accumulated", "OUTPUT", "Accumulated cost to the nearest patch"),
            ("allocation", "OUTPUT_ALLOCATION", "Nearest patch")):
        output = QgsProcessingModelOutput(name, description)
        output.setChildId("costdistance")
        output.setChildOutputName(child_output)
        outputs[name] = output
    distance.setModelOutputs(outputs)
    model.addChildAlgorithm(distance)
    model.updateDestinationParameters()
    return model


def main():
    application = QgsApplication([], False)
    application.initQgis()
    sys.path.append(os.path.join(application.pkgDataPath(), "python", "plugins"))
    from processing.core.Processing import Processing
    Processing.initialize()
    from gridgraph.provider import GridGraphProvider
    provider = GridGraphProvider()  # referenced: the registry does not keep it alive
    QgsApplication.processingRegistry().addProvider(provider)
    model = build_model()
    names = [d.name() for d in model.parameterDefinitions()]
    assert "costdistance:allocation" in names, names
    assert model.toFile(MODEL_PATH)
    print(MODEL_PATH, names)


if __name__ == "__main__":
    main()
